"""A faithful loopback server speaking the OpenAI chat-completions protocol over HTTP.

Tests use it because a hosted model can't be reached from them: the real `openai` client (and
`langchain_openai.ChatOpenAI` on top of it) talks to this server on 127.0.0.1 exactly as it would to
api.openai.com -- same JSON shapes, same Server-Sent Events stream, same error bodies and status
codes -- while every reply comes from a script, `script(request_body, call_index) -> Reply`.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

from tests.loopback import send_json

Args = str | dict[str, Any]  # tool-call arguments: a JSON string as sent, or a dict to serialise


@dataclass
class Reply:
    """One scripted answer. Precedence: delay (always applied first), then status != 200, raw, the completion."""

    text: str | None = None
    tool_calls: Sequence[tuple[str, Args]] = ()  # (name, arguments); ids are call_<n>, assigned by the server
    finish_reason: str | None = None  # default: "tool_calls" when there are tool calls, else "stop"
    status: int = 200  # != 200: an OpenAI-style error body with this status
    error_message: str | None = None
    raw: bytes | None = None  # sent verbatim as the 200 body (a malformed completion)
    delay: float = 0.0  # seconds to wait before answering (timeouts)
    chunk_size: int = 4  # streaming: characters of text / arguments per chunk
    cut_after: int | None = None  # streaming: stop after this many content/argument chunks, mid-arguments
    abort: bool = False  # with cut_after: drop the connection (no final 0-length chunk) instead of ending cleanly


Script = Callable[[dict[str, Any], int], Reply]

_ERRORS = {  # status: (type, code, message) as the hosted API sends them
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    404: ("invalid_request_error", "model_not_found", "The model does not exist or you do not have access to it."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again in 1s."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


def error_body(status: int, message: str | None = None) -> dict[str, Any]:
    kind, code, default = _ERRORS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None,
                                                f"HTTP {status}"))
    return {"error": {"message": message or default, "type": kind, "param": None, "code": code}}


class OpenAILoopback:
    """`with OpenAILoopback(script) as srv:` -- point a client at `srv.base_url`; `srv.requests` holds the bodies."""

    def __init__(self, script: Script, models: Sequence[str] = ("m",)) -> None:
        self.script, self.models = script, list(models)
        self.requests: list[dict[str, Any]] = []
        self._lock, self._closing = threading.Lock(), threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> OpenAILoopback:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # wakes handlers still sleeping out a delay
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next_call(self, body: dict[str, Any]) -> tuple[int, Reply]:
        with self._lock:
            self.requests.append(body)
            index = len(self.requests) - 1
        return index, self.script(body, index)

    def completion(self, body: dict[str, Any], reply: Reply) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The non-streamed chat.completion object, plus the tool calls with their assigned ids."""
        calls = [{"id": f"call_{next(self._ids)}", "type": "function",
                  "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                 for name, args in reply.tool_calls]
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else (reply.text or ""),
                                   "refusal": None}
        if calls:
            message["tool_calls"] = calls
        out_chars = len(reply.text or "") + sum(len(c["function"]["arguments"]) for c in calls)
        prompt = max(1, len(json.dumps(body.get("messages", []))) // 4)
        usage = {"prompt_tokens": prompt, "completion_tokens": max(1, out_chars // 4),
                 "total_tokens": prompt + max(1, out_chars // 4)}
        head = {"id": f"chatcmpl-loopback{len(self.requests)}", "created": int(time.time()),
                "model": body.get("model", self.models[0]), "system_fingerprint": "fp_loopback"}
        return ({**head, "object": "chat.completion", "usage": usage,
                 "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]}, calls)


def _chunks(srv: OpenAILoopback, body: dict[str, Any], reply: Reply) -> tuple[list[dict[str, Any]], bool]:
    """The chat.completion.chunk objects of a streamed reply, and whether the stream was cut short."""
    full, calls = srv.completion(body, reply)
    head = {k: full[k] for k in ("id", "created", "model", "system_fingerprint")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def pieces(s: str) -> list[str]:
        return [s[i:i + reply.chunk_size] for i in range(0, len(s), reply.chunk_size)]

    out, parts = [chunk({"role": "assistant", "content": None if calls else "", "refusal": None})], 0
    for i, call in enumerate(calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        for piece in pieces(call["function"]["arguments"]):
            if parts == reply.cut_after:
                return out, True
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
            parts += 1
    for piece in pieces(full["choices"][0]["message"]["content"] or ""):
        if parts == reply.cut_after:
            return out, True
        out.append(chunk({"content": piece}))
        parts += 1
    out.append(chunk({}, full["choices"][0]["finish_reason"]))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append({**head, "choices": [], "usage": full["usage"]})
    return out, False


def _handler(srv: OpenAILoopback) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and chunked transfer, as the hosted API

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                return send_json(self, error_body(404, f"Unknown path {self.path}"), 404)
            send_json(self, {"object": "list", "data": [{"id": m, "object": "model", "created": 0,
                                                         "owned_by": "loopback"} for m in srv.models]})

        def do_POST(self) -> None:
            body_bytes = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/") != "/v1/chat/completions":
                return send_json(self, error_body(404, f"Unknown path {self.path}"), 404)
            try:
                body = json.loads(body_bytes)
            except ValueError:
                return send_json(self, error_body(400, "We could not parse the JSON body of your request."), 400)
            _, reply = srv._next_call(body)
            if reply.delay and srv._closing.wait(reply.delay):
                return
            if reply.status != 200:
                return send_json(self, error_body(reply.status, reply.error_message), reply.status)
            if reply.raw is not None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.raw)))
                self.end_headers()
                self.wfile.write(reply.raw)
                return
            if not body.get("stream"):
                return send_json(self, srv.completion(body, reply)[0])
            chunks, cut = _chunks(srv, body, reply)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ([] if cut else ["data: [DONE]\n\n"])
            for event in events:
                data = event.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            if cut and reply.abort:
                self.close_connection = True  # no terminating chunk: the client sees the peer hang up mid-body
                return
            self.wfile.write(b"0\r\n\r\n")

    return Handler


def always_text(text: str) -> Script:
    return lambda body, index: Reply(text=text)


def tool_calls_then_text(calls: Sequence[tuple[str, Args]], text: str = "done") -> Script:
    """The first request gets all `calls` in one reply; every later request gets `text`."""
    return lambda body, index: Reply(tool_calls=calls) if index == 0 else Reply(text=text)


def many_tool_calls(n: int, name: str, args: Args, text: str = "done") -> Script:
    """The first request gets `n` calls of one tool in a single reply; later requests get `text`."""
    return tool_calls_then_text([(name, args)] * n, text)


def http_error(status: int, message: str | None = None) -> Script:
    return lambda body, index: Reply(status=status, error_message=message)


helpers = SimpleNamespace(always_text=always_text, tool_calls_then_text=tool_calls_then_text,
                          many_tool_calls=many_tool_calls, http_error=http_error)
