"""Small pieces the tests' loopback HTTP servers share."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def send_json(handler: BaseHTTPRequestHandler, answer: Any, status: int = 200) -> None:
    """Answer a request with a JSON body, as the chat platforms' webhooks do."""
    data = json.dumps(answer).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def send_page(handler: BaseHTTPRequestHandler, page: str, status: int = 200) -> None:
    """Answer with an HTML page, as a corporate proxy's login page or a maintenance page does in a webhook's place."""
    data = page.encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "text/html; charset=utf-8")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
