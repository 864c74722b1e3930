"""One loader for the prompt and message templates in prompts/; it injects the current time."""

from __future__ import annotations

import string
from datetime import datetime
from functools import lru_cache

from agent.assets import PROMPTS_DIR
from core.untrusted import fence_untrusted  # noqa: F401 - re-exported for the prompt builders


class PromptError(KeyError):
    pass


@lru_cache(maxsize=64)
def _template(name: str) -> string.Template:
    path = PROMPTS_DIR / name
    if not path.is_file():
        raise PromptError(f"no prompt template {name!r} in {PROMPTS_DIR} (is the package installed completely?)")
    return string.Template(path.read_text(encoding="utf-8"))


def template_name(base: str, language: str) -> str:
    """`notify_warning` + `zh` -> `notify_warning.zh.md`, falling back to English."""
    candidate = f"{base}.{language}.md"
    return candidate if (PROMPTS_DIR / candidate).is_file() else f"{base}.en.md"


def render(name: str, now: datetime, **values: object) -> str:
    """Render a template; `$now` is always available. A missing value is an error, not a blank."""
    try:
        return _template(name).substitute(now=now.strftime("%Y-%m-%d %H:%M UTC"), **values).strip()
    except KeyError as exc:
        raise PromptError(f"prompt {name!r} needs a value for {exc.args[0]!r}") from None
