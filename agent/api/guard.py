"""Checks every HTTP request passes before the app reads its body (an ASGI middleware; server.py installs it).

In order: the Host header (local development mode only: loopback names and the bound host, against DNS
rebinding), credentials (every route but health, metrics, the UI's static files and the self-authenticating
webhooks and approve links), and cross-site writes (a state-changing API call must not come from a form or
another site). The body size limit is FastAPI's own `max_body_size` (Content-Length and streamed bytes).
NoFraming (also installed by server.py) keeps every response out of other sites' frames.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent.api.auth import UNAUTHENTICATED, CredentialsRefused, auth_mode, identify
from agent.config.settings import Settings

PUBLIC_PATHS = frozenset({"/", "/ui", "/healthz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect",
                          "/redoc", "/favicon.ico"})
PUBLIC_PREFIXES = ("/static/",)
# Webhooks authenticate by the platform's signature, approve links by their HMAC: not by our credentials.
SELF_AUTHENTICATING = ("/webhooks/", "/chatops/")
ALERT_WEBHOOK = "/api/alerts"  # Alertmanager: its own bearer token (agent/alerts/route.py)
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The only content types an HTML form can send (and a cross-site fetch without a CORS preflight).
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data", "text/plain")
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _host_name(host_header: str) -> str:
    """'example.com:8000' -> 'example.com'; '[::1]:8000' -> '::1'."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def allowed_hosts(bind_host: str | None) -> frozenset[str]:
    """Loopback names, and the host `steward serve` was bound to (unless it is a wildcard address)."""
    names = set(LOOPBACK_NAMES)
    name = (bind_host or "").strip().strip("[]").lower()
    if name not in ("", "0.0.0.0", "::"):
        names.add(name)
    return frozenset(names)


def _refuse(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def check_request(request: Request, settings: Settings, hosts: frozenset[str]) -> JSONResponse | None:
    """The refusal for this request, or None when it may go on to the app (which has not read its body)."""
    path, method = request.url.path, request.method
    if auth_mode(settings) == "local-dev":
        host = request.headers.get("host", "")
        if _host_name(host) not in hosts:
            return _refuse(400, f"Host {host!r} is not served in local development mode (DNS rebinding guard; "
                                f"use one of {', '.join(sorted(hosts))}) / 本地开发模式不接受该 Host")
    self_authenticating = path.startswith(SELF_AUTHENTICATING) or path == ALERT_WEBHOOK
    if not (path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES) or self_authenticating):
        try:
            who = identify(request, settings)
        except CredentialsRefused as exc:
            return _refuse(401, str(exc), {"WWW-Authenticate": "Bearer"})
        if who is None:
            return _refuse(401, UNAUTHENTICATED, {"WWW-Authenticate": "Bearer"})
    if method in STATE_CHANGING and not self_authenticating:
        fetch_site = request.headers.get("sec-fetch-site")
        origin = request.headers.get("origin")
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return _refuse(403, f"cross-site request refused (Sec-Fetch-Site: {fetch_site}) / 拒绝跨站请求")
        if fetch_site is None and origin is not None and _origin_host(origin) != request.headers.get("host", "").lower():
            return _refuse(403, f"cross-site request refused (Origin: {origin}) / 拒绝跨站请求")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type in FORM_TYPES:
            return _refuse(415, f"{content_type} is not accepted here: send JSON (Content-Type: application/json) "
                                "/ 请以 JSON 发送请求")
    return None


def _origin_host(origin: str) -> str:
    return origin.split("://", 1)[1].rstrip("/").lower() if "://" in origin else ""


class RequestGuard:
    """The ASGI middleware around the app: refuses a request before any route reads its body."""

    def __init__(self, app: ASGIApp, settings: Settings, bind_host: str | None = None) -> None:
        self.app, self.settings, self.hosts = app, settings, allowed_hosts(bind_host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = check_request(Request(scope), self.settings, self.hosts)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


# No page of this server may be shown inside another site's frame: a framed UI's Approve click is a same-origin
# request, which the checks above let through (clickjacking). Sent on every response, HTML or not.
NO_FRAMING = ((b"x-frame-options", b"DENY"), (b"content-security-policy", b"frame-ancestors 'none'"))


class NoFraming:
    """The ASGI middleware that adds X-Frame-Options: DENY and CSP frame-ancestors 'none' to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers.extend((name, value) for name, value in NO_FRAMING if name not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
