"""Cluster-supplied text (logs, labels, alerts) fenced as data, so a model reads it as data, never as instructions."""

from __future__ import annotations

import html
import re

from core.text import one_line

# Any tag of the fence's own name, opening or closing, in any case or spacing, written with any look-alike of `<`
# (`</UNTRUSTED>`, `</untrusted >`, `< / untrusted>`, `<untrusted source=…>`, `&lt;/untrusted&gt;`): its name gets
# a trailing underscore (`</untrusted_>`), so no text inside can end the fence or open another.
_FENCE_TAG = re.compile(r"(?i)((?:<|＜|‹|&lt;|&#0*60;|&#x0*3c;)\s*/?\s*untrusted)")


def _defused(text: str) -> str:
    return _FENCE_TAG.sub(r"\1_", text)


def fence_untrusted(label: str, text: str) -> str:
    """Wrap cluster-supplied text so the model reads it as data, never as instructions. The label may hold the
    cluster's text too (`logs:<job name>`): it is one line, its quotes and brackets escaped."""
    source = html.escape(_defused(one_line(label)), quote=True)
    return f'<untrusted source="{source}">\n{_defused(text)}\n</untrusted>'
