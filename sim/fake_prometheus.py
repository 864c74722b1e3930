"""A loopback stand-in for Prometheus' query API that answers from a function (unit tests and benchmarks)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

# (path, params) -> the `result` list of a Prometheus answer (or a whole JSON answer as bytes); raise to send an error
Answer = Callable[[str, dict[str, str]], list[dict[str, Any]] | bytes]
# (path, params) -> the `warnings` a successful answer carries, as Prometheus and Thanos (partial response) send them
Warnings = Callable[[str, dict[str, str]], list[str]]


class FakePrometheus:
    """Serves /api/v1/query and /api/v1/query_range on 127.0.0.1 in a background thread.

    `requests` records every (path, params) received, so tests can count what a sweep cost. `warnings`, when
    given, adds a `warnings` list to successful answers (an empty list adds none), e.g. Thanos' partial-response
    warning when a store did not answer.
    """

    def __init__(self, answer: Answer, warnings: Warnings | None = None) -> None:
        self.answer = answer
        self.warnings = warnings
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.last_headers: dict[str, str] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                url = urlparse(self.path)
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                fake.requests.append((url.path, params))
                fake.last_headers = dict(self.headers.items())
                if url.path not in ("/api/v1/query", "/api/v1/query_range"):
                    return self._send(404, {"status": "error", "errorType": "not_found", "error": url.path})
                try:
                    result = fake.answer(url.path, params)
                except Exception as exc:  # report it the way Prometheus reports a bad query
                    return self._send(400, {"status": "error", "errorType": "bad_data", "error": str(exc)})
                if isinstance(result, bytes):  # a whole answer serialised in advance (benchmarks)
                    return self._send(200, result)
                kind = "matrix" if url.path.endswith("query_range") else "vector"
                body: dict[str, Any] = {"status": "success", "data": {"resultType": kind, "result": result}}
                warned = fake.warnings(url.path, params) if fake.warnings is not None else []
                if warned:
                    body["warnings"] = list(warned)
                self._send(200, body)

            def _send(self, code: int, body: dict[str, Any] | bytes) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakePrometheus:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
