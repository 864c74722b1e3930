"""A small OpenAI-compatible chat-completions server around one local llama.cpp model.

Protocol: the subset of the OpenAI HTTP API an agent needs, over HTTP/1.1 on loopback:

- `POST /v1/chat/completions` with `messages` (system, developer, user, assistant with `content: null`
  and `tool_calls`, tool), `tools`, `tool_choice` (none, auto — the default, as on OpenAI — required, or a
  named function), `max_tokens`/`max_completion_tokens`, `temperature`, `top_p`, `seed`, `stop`, `stream`
  and `stream_options.include_usage`. Replies are `chat.completion` objects, or Server-Sent Events of
  `chat.completion.chunk` objects ending with `data: [DONE]`; tool calls carry ids (`call_…`) and JSON-string
  arguments, `finish_reason` is `tool_calls`, `stop` or `length`, and `usage` counts tokens.
- `GET /v1/models` lists the one model; `GET /health` says whether it is loaded.
- Errors are OpenAI error bodies (`{"error": {"message", "type", "param", "code"}}`) with 400 (a field that
  is wrong, named), 404 (unknown path or model) or 500.

The prompt is the model's own chat template (agent/llm/chat_format.py), so a Qwen model gets its tools in
its system turn and answers in `<tool_call>` blocks, which become OpenAI tool calls. One request runs at a
time (one model, one context); others wait their turn. A prompt that shares a prefix with the previous one
(the same system prompt and tools) reuses its evaluated tokens; `usage.prompt_tokens_details.cached_tokens`
says how many. No authentication: it binds to 127.0.0.1.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Generator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agent.llm.chat_format import (
    ChatTemplate,
    ParsedReply,
    RequestError,
    StreamedText,
    check_tools,
    parse_reply,
    template_messages,
    tool_choice_prefill,
)

STOP = ["<|im_end|>", "<|endoftext|>"]


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise RequestError(f"{key} must be a number from {low} to {high}, not {value!r}", key)
    return float(value)


class Engine:
    """One llama.cpp model behind a lock: requests in OpenAI's shape, replies in OpenAI's shape."""

    def __init__(self, model_path: Path, model_id: str, *, aliases: tuple[str, ...] = (), n_ctx: int = 8192,
                 threads: int | None = None, max_tokens: int = 512) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise RuntimeError("llama-cpp-python is not installed: install the local-llm extra "
                               "(pip install 'gpu-steward[local-llm]'; docs/evals.md says how to build it)") from exc
        self.model_id, self.aliases = model_id, {model_id, *aliases}
        self.max_tokens = max_tokens
        self.llama = Llama(model_path=str(model_path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                           n_batch=256, verbose=False)
        source = self.llama.metadata.get("tokenizer.chat_template")
        if not source:
            raise RuntimeError(f"{model_path} carries no chat template (tokenizer.chat_template)")
        eos = self.llama.detokenize([self.llama.token_eos()], special=True).decode("utf-8", "replace")
        self.template = ChatTemplate(source, eos_token=eos)
        self.n_ctx = self.llama.n_ctx()
        self.lock = threading.Lock()
        self.requests = 0

    def prepare(self, body: Any) -> dict[str, Any]:
        """Everything a request asks for, checked; a RequestError names the first field that is wrong."""
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model not in self.aliases:
            raise RequestError(f"model {model!r} is not served here; this server serves {self.model_id!r}",
                               "model")
        if body.get("n") not in (None, 1):
            raise RequestError("n must be 1", "n")
        if body.get("logprobs"):
            raise RequestError("logprobs are not supported", "logprobs")
        fmt = body.get("response_format")
        if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
            raise RequestError("response_format: only {'type': 'text'} is supported", "response_format")
        messages = template_messages(body.get("messages"))
        tools = check_tools(body.get("tools"))
        show_tools, prefill = tool_choice_prefill(body.get("tool_choice"), tools)
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
            raise RequestError("stop must be a string or a list of up to 4 non-empty strings", "stop")
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise RequestError(f"max_tokens must be a positive integer, not {limit!r}", "max_tokens")
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise RequestError(f"seed must be an integer, not {seed!r}", "seed")
        options = body.get("stream_options") or {}
        prompt = self.template.render(messages, tools if show_tools else None) + prefill
        tokens = self.llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        if len(tokens) >= self.n_ctx:
            raise RequestError(f"the prompt is {len(tokens)} tokens; this server's context is {self.n_ctx}",
                               "messages")
        return {
            "tokens": tokens, "prefill": prefill, "tool_names": {t["function"]["name"] for t in tools},
            "max_tokens": min(limit or self.max_tokens, self.n_ctx - len(tokens)),
            "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
            "top_p": _number(body, "top_p", 1.0, 0.0, 1.0), "seed": seed, "stop": STOP + stop,
            "stream": bool(body.get("stream")),
            "include_usage": bool(isinstance(options, dict) and options.get("include_usage")),
        }

    def _reused(self, tokens: list[int]) -> int:
        """Prompt tokens the previous request already evaluated (call under the lock): a shared prefix is not
        evaluated again. Only the last prompt is kept (llama-cpp's state cache copies ~0.3 GB of logits per
        entry), so a chat between two planner calls costs the planner its prefix."""
        return int(self.llama.longest_token_prefix(self.llama.input_ids[: self.llama.n_tokens].tolist(), tokens))

    @staticmethod
    def _usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def _generate(self, req: dict[str, Any], stream: bool) -> Any:
        return self.llama.create_completion(
            req["tokens"], max_tokens=req["max_tokens"], temperature=req["temperature"], top_p=req["top_p"],
            min_p=0.0, repeat_penalty=1.0, seed=req["seed"],
            stop=req["stop"], stream=stream)

    def _head(self) -> dict[str, Any]:
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": self.model_id,
                "system_fingerprint": None}

    @staticmethod
    def _finish(parsed: ParsedReply, reason: str | None) -> str:
        if reason == "length":
            return "length"  # a reply cut off by the token limit is reported as such, tool calls or not
        return "tool_calls" if parsed.tool_calls else "stop"

    def complete(self, req: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests += 1
            cached = self._reused(req["tokens"])
            out = self._generate(req, stream=False)
        choice = out["choices"][0]
        parsed = parse_reply(req["prefill"] + choice["text"], req["tool_names"])
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.tool_calls:
            message["tool_calls"] = parsed.tool_calls
        usage = out["usage"]
        return {**self._head(), "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": self._finish(parsed, choice.get("finish_reason"))}],
                "usage": self._usage(usage["prompt_tokens"], usage["completion_tokens"], cached)}

    def stream(self, req: dict[str, Any]) -> Generator[dict[str, Any], None, None]:
        """The chunks of a streamed reply. Content streams as it is generated until something may start a
        tool call; the rest, and the tool calls, follow once the reply is complete."""
        head = {**self._head(), "object": "chat.completion.chunk"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        text = StreamedText(tools=bool(req["tool_names"]))
        text.feed(req["prefill"])
        reason = None
        with self.lock:
            self.requests += 1
            cached = self._reused(req["tokens"])
            pieces = self._generate(req, stream=True)
            try:
                for piece in pieces:
                    c = piece["choices"][0]
                    out = text.feed(c["text"])
                    if out:
                        yield chunk({"content": out})
                    reason = c.get("finish_reason") or reason
            finally:
                pieces.close()  # a client that went away stops the generation
            generated = text.raw[len(req["prefill"]):]
            completion_tokens = len(self.llama.tokenize(generated.encode("utf-8"), add_bos=False, special=True))
        parsed = parse_reply(text.raw, req["tool_names"])
        rest = text.rest(parsed)
        if rest:
            yield chunk({"content": rest})
        for i, call in enumerate(parsed.tool_calls):
            yield chunk({"tool_calls": [{"index": i, **call}]})
        yield chunk({}, self._finish(parsed, reason))
        # Always last; sent only when the request asked for it (stream_options.include_usage).
        yield {**head, "choices": [], "usage": self._usage(len(req["tokens"]), completion_tokens, cached)}


def _log_line(usage: dict[str, Any], finish: str, started: float) -> None:
    sys.stderr.write(f"chat.completions: {usage['prompt_tokens']} prompt tokens "
                     f"({usage['prompt_tokens_details']['cached_tokens']} reused) + {usage['completion_tokens']} "
                     f"generated, {finish}, {time.monotonic() - started:.1f} s\n")
    sys.stderr.flush()


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _handler(engine: Engine, log: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "gpu-steward-local-llm"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            if log:
                sys.stderr.write(f"{self.address_string()} {format % args}\n")

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": engine.model_id, "object": "model",
                                                              "created": 0, "owned_by": "local"}]})
            elif self.path.rstrip("/") == "/health":
                self._json(200, {"status": "ok", "model": engine.model_id, "requests": engine.requests})
            else:
                self._json(404, error_body(f"no route {self.path}", code="not_found"))

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._json(404, error_body(f"no route {self.path}", code="not_found"))
                return
            started = time.monotonic()
            try:
                try:
                    body = json.loads(raw or b"null")
                except ValueError as exc:
                    raise RequestError(f"the request body is not JSON: {exc}") from None
                req = engine.prepare(body)
            except RequestError as exc:
                status = 404 if exc.param == "model" else 400
                self._json(status, error_body(str(exc), param=exc.param,
                                              code="model_not_found" if status == 404 else None))
                return
            try:
                if req["stream"]:
                    self._stream(req)
                else:
                    reply = engine.complete(req)
                    self._json(200, reply)
                    if log:
                        u, choice = reply["usage"], reply["choices"][0]
                        _log_line(u, choice["finish_reason"], started)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            except Exception as exc:  # the model failed: an error body, not a dropped connection
                self._json(500, error_body(f"{type(exc).__name__}: {exc}", kind="server_error"))

        def _stream(self, req: dict[str, Any]) -> None:
            started = time.monotonic()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            chunks = engine.stream(req)
            usage = None
            try:
                for chunk in chunks:
                    if "usage" in chunk:
                        usage = chunk["usage"]
                        if not req["include_usage"]:
                            continue
                    self.wfile.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                raise
            except Exception as exc:  # headers are sent: the error goes in the stream, as OpenAI sends it
                body = error_body(f"{type(exc).__name__}: {exc}", kind="server_error")
                self.wfile.write(f"data: {json.dumps(body)}\n\n".encode())
            finally:
                chunks.close()  # a client that went away releases the model at once
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            if log and usage:
                _log_line(usage, "streamed", started)

    return Handler


def make_server(engine: Engine, port: int, *, log: bool = True) -> ThreadingHTTPServer:
    httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(engine, log))
    httpd.daemon_threads = True
    return httpd
