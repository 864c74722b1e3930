"""The web UI shows the cluster's text as itself: a Slurm job's name (user text: the parser drops only ASCII
controls) holding bidirectional overrides or isolates, direction marks or zero-width characters is written with
those characters as escapes (as the terminal and the chat write them: core.text.one_line), so `gpu/\u202e…` cannot
read as another job's name on an approval card, in the findings table or in the audit. Runs render.js under node."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from core.text import one_line
from server import WEB_DIR  # the UI steward serve serves

HIDDEN = "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2066\u2067\u2068\u2069\ufeff\u061c"


def _render(tmp_path: Path, text: str) -> dict[str, str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    for name in ("render.js", "i18n.js"):
        shutil.copy(WEB_DIR / name, tmp_path / name)
    (tmp_path / "package.json").write_text('{"type": "module"}')
    (tmp_path / "run.mjs").write_text(
        "globalThis.localStorage = {getItem: () => null, setItem: () => {}};\n"
        "globalThis.navigator = {language: 'en'};\n"
        "const r = await import('./render.js');\n"
        f"const t = {json.dumps(text)};\n"
        "console.log(JSON.stringify({esc: r.esc(t), inline: r.inline(t), markdown: r.markdown(t), attr: r.attr(t),"
        " shown: r.shown(t)}));\n")
    out = subprocess.run([node, str(tmp_path / "run.mjs")], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_a_job_name_with_bidi_overrides_is_not_rendered_reversed_in_the_web_ui(tmp_path):
    name = "gpu/\u202egnivres-dorp\u202c-\u2066x\u2069\u200f a\u200bb\ufeff"
    assert one_line(name) != name  # the terminal and chat surfaces escape them
    shown = _render(tmp_path, name)
    for surface in ("esc", "inline", "markdown", "shown"):
        html = shown[surface]
        raw = sorted({f"U+{ord(c):04X}" for c in html if c in HIDDEN})
        assert raw == [], f"{surface}({name!r}) puts {raw} into the page: {html!r}"
        assert "gpu/\\u202egnivres-dorp\\u202c-\\u2066x\\u2069\\u200f a\\u200bb\\ufeff" in html, html
    # An attribute the page reads back and sends (the exemption row's data-target, for Revoke) keeps the name as
    # the server gave it, HTML-escaped only: escaping it would revoke another name than the one listed.
    assert shown["attr"] == name


def test_chinese_text_markup_and_line_breaks_are_kept(tmp_path):
    text = "- 作业 **ml-team/训练** 空闲 `keep 4h 原因`\n\tnext <b>&"
    shown = _render(tmp_path, text)
    assert shown["esc"] == "- 作业 **ml-team/训练** 空闲 `keep 4h 原因`\n\tnext &lt;b&gt;&amp;"
    assert shown["markdown"] == ("<ul><li>作业 <strong>ml-team/训练</strong> 空闲 <code>keep 4h 原因</code></li></ul>"
                                 "<p>\tnext &lt;b&gt;&amp;</p>")
    assert _render(tmp_path, "a\x1b[31mb\x85c")["esc"] == "a\\x1b[31mb\\x85c"  # controls as one_line writes them
