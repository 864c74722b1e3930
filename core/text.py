"""Small text helpers shared by the surfaces."""

from __future__ import annotations

import re


def plural(n: int, one: str, many: str | None = None) -> str:
    """`1 action`, `2 actions` (`many` for an irregular plural: `1 entry`, `2 entries`)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


# Text from the cluster (a job's name, a user, a project, a label, a log line) or from a model is shown as text,
# never as markup or terminal control: one_line for a terminal or a plain line, markdown_text for a chat message.
# Zero-width characters too (U+200B-200D, U+2060, U+FEFF, the Arabic letter mark U+061C), as the web UI writes them
# (agent/web/render.js): `gpu/zw\u200bjob` must not print as `gpu/zwjob`, another job's name.
_CONTROLS = re.compile("\r\n|[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff\u061c]")


def gigabytes(gb: float) -> str:
    """GPU memory as an operator reads it: whole GB from 10 up, one decimal under (a CUDA context's 0.5 GB is not 0)."""
    return f"{gb:.0f}" if gb >= 9.95 else f"{gb:.1f}"


def _escape(match: re.Match[str]) -> str:
    c = match.group()
    if c in ("\n", "\r\n"):
        return "␤"
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: str) -> str:
    """`text` as one line that only shows itself: a line break becomes ␤, and a control character (ESC and the
    rest of C0, DEL, C1), a Unicode line or paragraph separator or a bidirectional override is written as its
    escape (`\\x1b`, `\\u202e`), so a job's name can neither print a line of its own nor recolour, move or erase
    what a terminal shows."""
    return _CONTROLS.sub(_escape, text)


# Markdown builds links and images from brackets and HTML (and WeCom's <@userid> mentions) from angle brackets:
# they are shown as look-alikes. An entity (&#91;) would be decoded into one; a bare URL would be linked.
_MARKUP = str.maketrans({"[": "［", "]": "］", "<": "‹", ">": "›"})
_ENTITY = re.compile(r"&(#?\w+;)")
_SCHEME = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*):(?=//)")
_AT_ALL = re.compile(r"(?i)@(?=all\b|所有人)")
_OPENING = re.compile(r"^(\s*)\(")  # after a bracket of the steward's ("[GPU Steward] (url)"), a link's target


# What a text message renders: an HTML link or image, a closing tag, a tag with attributes, a <@mention>.
_LIVE_TAG = re.compile(r"<(?=[@/!]|(?:a|img)\b|[A-Za-z][\w-]*\s+[^<>]*=)", re.I)


def chat_reply_text(text: str) -> str:
    """A reply the steward composed from its own lines and the cluster's words (job names, log lines), as a DingTalk or
    WeCom text message: its lines kept, but no live HTML tag (WeCom renders `<a href>` in a text message) or
    <@mention>, no live URL and no @all, wherever they came from. The steward's own placeholders (`keep 4h <job>
    <reason>`) are no tag and stay as written."""
    text = _LIVE_TAG.sub("‹", text)
    text = _ENTITY.sub(r"＆\1", text)
    text = _SCHEME.sub(r"\1：", text)
    return _AT_ALL.sub("＠", text)


def markdown_text(text: str) -> str:
    """`text` (from the cluster or a model) as plain text inside a markdown chat message (DingTalk, WeCom): one
    line (one_line: no new block, no bullet or heading of its own), no link, image, HTML tag or <@mention>
    (brackets as look-alikes ［］‹›), no live URL (`https：//`), no @all. Other text, Chinese included, is kept."""
    text = one_line(text).translate(_MARKUP)
    text = _ENTITY.sub(r"＆\1", text)
    text = _SCHEME.sub(r"\1：", text)
    text = _OPENING.sub("\\1（", text)
    return _AT_ALL.sub("＠", text)
