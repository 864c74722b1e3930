"""OpenAI chat messages and tools <-> a model's own chat template, and its text -> OpenAI tool calls.

The prompt is rendered with the Jinja chat template the GGUF carries (Qwen2.5's puts the tools in the
system turn and asks for `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks), so the
model sees exactly the format it was trained on. Its reply is parsed back: each `<tool_call>` block
is one call; without any, a ```json fence or a bare JSON object naming a tool the request offered is
taken as one (some models write that). Anything else is content. Pure functions: no model, no I/O.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class RequestError(ValueError):
    """A chat-completions request that cannot be served; the message names the field and what is wrong."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


ROLES = ("system", "developer", "user", "assistant", "tool")


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # As transformers renders chat templates: plain json.dumps, non-ASCII kept (Chinese stays Chinese).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class ChatTemplate:
    """A model's Jinja chat template, rendered as transformers renders it."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        self._template = env.from_string(source)
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        def raise_exception(message: str) -> None:
            raise RequestError(f"the model's chat template refused the messages: {message}", "messages")

        return self._template.render(messages=messages, tools=tools or None, add_generation_prompt=True,
                                     bos_token=self.bos_token, eos_token=self.eos_token,
                                     raise_exception=raise_exception,
                                     strftime_now=lambda f: datetime.now().strftime(f))


def _text(content: Any, where: str) -> str:
    """OpenAI content: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}.content[{i}]: only text parts are supported", where)
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where}.content must be a string, null or a list of text parts, "
                       f"not {type(content).__name__}", where)


def template_messages(messages: Any) -> list[dict[str, Any]]:
    """The request's messages as chat templates expect them: content always a string (assistant turns
    with tool calls send null), tool-call arguments as objects (OpenAI sends JSON strings)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(f"{where} must be an object", where)
        role = m.get("role")
        if role not in ROLES:
            raise RequestError(f"{where}.role is {role!r}; expected one of {', '.join(ROLES)}", where)
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": _text(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                raise RequestError(f"{where}.tool_calls must be a list", where)
            msg["tool_calls"] = [_template_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
        if role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
        out.append(msg)
    return out


def _template_call(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise RequestError(f"{where} must be {{'type': 'function', 'function': {{'name': ..., 'arguments': ...}}}}",
                           where)
    args: Any = fn.get("arguments") or {}
    if isinstance(args, str):
        with contextlib.suppress(ValueError):  # not JSON: shown to the model as it sent it
            args = json.loads(args) if args.strip() else {}
    return {"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def check_tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError("tools must be a list", "tools")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str):
            raise RequestError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., ...}}}}",
                               f"tools[{i}]")
    return tools


def tool_choice_prefill(tool_choice: Any, tools: list[dict[str, Any]]) -> tuple[bool, str]:
    """(whether the model sees the tools, text the reply is started with). OpenAI's default is "auto".

    "required" starts the reply inside a tool call; a named function starts it inside a call to that one.
    """
    if tool_choice is None or tool_choice == "auto":
        return bool(tools), ""
    if tool_choice == "none":
        return False, ""
    if not tools:
        raise RequestError("tool_choice needs tools", "tool_choice")
    if tool_choice == "required":
        return True, "<tool_call>\n{\"name\": \""
    name = (tool_choice.get("function") or {}).get("name") if isinstance(tool_choice, dict) else None
    if not isinstance(name, str):
        raise RequestError("tool_choice must be 'none', 'auto', 'required' or "
                           "{'type': 'function', 'function': {'name': ...}}", "tool_choice")
    if name not in {t["function"]["name"] for t in tools}:
        raise RequestError(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
    return True, "<tool_call>\n{\"name\": " + json.dumps(name) + ", \"arguments\": "


@dataclass
class ParsedReply:
    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_FENCED = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.S)


def _decode_call(body: str, known: set[str] | None) -> list[tuple[str, str]] | None:
    """[(name, arguments JSON)] from one JSON object (or a list of them), or None when it is not a call.
    With `known`, only names of offered tools count (used for untagged JSON, which may just be an answer)."""
    body = body.strip()
    if not body:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(body)  # trailing text (an extra brace) is ignored
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        if known is not None and item["name"] not in known:
            return None
        args = item.get("arguments", item.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None
        if not isinstance(args, dict):
            return None
        calls.append((item["name"], json.dumps(args, ensure_ascii=False)))
    return calls or None


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def parse_reply(text: str, tool_names: set[str]) -> ParsedReply:
    """The model's text as an OpenAI assistant message: content and tool calls (ids `call_…`, JSON-string
    arguments). A tagged block that is not valid JSON stays in the content, where the caller can see it; an
    empty one (the model began a call and stopped) is dropped."""
    calls: list[dict[str, Any]] = []
    if tool_names:
        spans: list[tuple[int, int]] = []
        for m in _TAGGED.finditer(text):
            decoded = _decode_call(m.group(1), None)
            if decoded:
                calls += [_call(n, a) for n, a in decoded]
            if decoded or not m.group(1).strip():  # an empty tag (a call begun, nothing written) is no text
                spans.append(m.span())
        if not calls:
            for m in _FENCED.finditer(text):
                decoded = _decode_call(m.group(1), tool_names)
                if decoded:
                    calls += [_call(n, a) for n, a in decoded]
                    spans.append(m.span())
        if not calls:
            decoded = _decode_call(text, tool_names)
            if decoded and text.strip().startswith(("{", "[")):
                calls += [_call(n, a) for n, a in decoded]
                spans.append((0, len(text)))
        for start, end in reversed(spans):
            text = text[:start] + text[end:]
    content = text.strip()
    return ParsedReply(content=content or (None if calls else ""), tool_calls=calls)


MARKERS = ("<tool_call>", "```")


class StreamedText:
    """Decides, token by token, which text can be streamed as content before the reply is complete.

    Text is held back from the first thing that may start a tool call (a `<tool_call>` tag, a fence, a
    reply that opens with JSON) and while it may be the start of a marker; leading and trailing
    whitespace are held too. What was streamed is always a prefix of `parse_reply(...).content`, so the
    rest can be sent once the reply is complete.
    """

    def __init__(self, tools: bool) -> None:
        self.tools = tools
        self.raw = ""
        self.sent = ""
        self.holding = False

    def feed(self, piece: str) -> str:
        self.raw += piece
        if self.holding:
            return ""
        text = self.raw.lstrip()
        if not text:
            return ""
        if self.tools:
            if text[0] in "{[":
                self.holding = True
                return ""
            cut = min((i for i in (text.find(m) for m in MARKERS) if i >= 0), default=-1)
            if cut >= 0:
                self.holding = True
                text = text[:cut]
            else:
                for m in MARKERS:  # the tail may be the beginning of a marker
                    for n in range(len(m) - 1, 0, -1):
                        if text.endswith(m[:n]):
                            text = text[:-n]
                            break
        text = text.rstrip()
        out = text[len(self.sent):] if text.startswith(self.sent) else ""
        self.sent += out
        return out

    def rest(self, parsed: ParsedReply) -> str:
        content = parsed.content or ""
        return content[len(self.sent):] if content.startswith(self.sent) else ""
