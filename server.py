"""The FastAPI app (chat UI, approvals, findings, audit, savings, metrics, sweeps) and `steward serve`."""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import math
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from agent.api.auth import auth_mode, check_access_settings
from agent.api.runtime import StewardEvent, StewardRuntime
from agent.config.settings import Settings

log = logging.getLogger("steward.server")
WEB_DIR = Path(__file__).parent / "agent" / "web"


def invalid_summary(errors: list[dict]) -> str:
    """One line saying what is wrong with a request, in English and Chinese (the `detail` list stays for programs)."""
    if any(e.get("type") == "json_invalid" for e in errors):
        return "the body is not valid JSON / 请求体不是合法的 JSON"
    parts = [f"{'.'.join(str(x) for x in e.get('loc', ())[1:]) or 'body'}: {e.get('msg', '')}" for e in errors[:3]]
    return "; ".join(parts) + " / 请求参数有误：" + "；".join(p.split(": ", 1)[0] for p in parts)


def json_depth_limit() -> int:
    """About how deeply nested JSON Python's reader takes before a RecursionError (the interpreter's limit)."""
    return sys.getrecursionlimit()


ECHO_DEPTH = 20  # how deeply an error echoes a nested input back; deeper parts are elided


def _finite(value: object, depth: int = 0) -> object:
    """`value` with every NaN or Infinity written as text: JSON has no such numbers, and an error echoing one
    back must still parse. Nesting past ECHO_DEPTH is elided ("..."): a body nested hundreds deep, which the reader
    took, made the echo recurse past the interpreter's limit (a 500)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict | list | tuple) and depth >= ECHO_DEPTH:
        return "..."
    if isinstance(value, dict):
        return {k: _finite(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, depth + 1) for v in value]
    return value


def _echo(value: object) -> object:
    """An input a validation error echoes: a body FastAPI handed over as raw bytes (a content type it does not
    parse) as text, undecodable bytes replaced; text cut at 200 characters (a 5,000-character message need not
    come back whole)."""
    if isinstance(value, bytes | bytearray):
        value = bytes(value[:800]).decode("utf-8", "replace")
    if isinstance(value, str) and len(value) > 200:
        return value[:200] + " …"
    return value


def create_app(settings: Settings, *, service: StewardRuntime | None = None, extra_routers: Iterable[APIRouter] = (),
               listeners: Iterable[Callable[[StewardEvent], None]] = (), notifier: Any = None,
               chat_model: Any = None, start_s: float | None = None, speed: float | None = None,
               run_scheduler: bool = True, bind_host: str | None = None) -> FastAPI:
    """The app; nothing starts until its lifespan does. `service` defaults to the simulated demo cluster.

    extra_routers: e.g. the ChatOps webhooks (they authenticate by platform signature, not by our tokens).
    listeners: called on sweep_finished / approval_requested / approval_answered (ChatOps notifications).
    notifier: replaces the simulated inbox notifier when the runtime is built here.
    bind_host: the address `steward serve` listens on; in local development mode the Host header must name
    it or a loopback name. ValueError when the access settings cannot be served safely.
    """
    check_access_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = service
        if runtime is None and settings.backend != "sim":
            from agent.api.build import cluster_runtime

            runtime = cluster_runtime(settings, chat_model=chat_model)
        elif runtime is None:
            from agent.api.build import simulated_runtime

            runtime = simulated_runtime(settings, speed=speed, start_s=start_s, notifier=notifier,
                                        chat_model=chat_model)
        runtime.listeners.extend(listeners)
        if runtime.data_dir is None:
            runtime.data_dir = settings.data_dir
        runtime.stores.update(health_stores)  # what /healthz reports besides the audit and approval stores
        app.state.runtime = runtime
        if auth_mode(settings) == "local-dev":
            log.warning("no STEWARD_API_TOKENS and no trusted proxy: local development mode, every caller is an "
                        "approver; serve on 127.0.0.1 only (docs/access-control.md)")
        if run_scheduler:
            runtime.start()
        try:
            yield
        finally:
            runtime.stop()

    from agent.api import chat, routes, runbook_pages
    from agent.api.guard import NoFraming, RequestGuard

    # No /docs or /redoc: FastAPI's pages load their scripts from a public CDN, which a cluster's browsers may not
    # reach and an operator's browser should not be sent to; the schema is served at /openapi.json.
    app = FastAPI(title="GPU Steward", version="0.1.0", lifespan=lifespan, max_body_size=settings.max_body_bytes,
                  docs_url=None, redoc_url=None, description="Finds and reclaims wasted GPUs through a deterministic guardrail, with approvals "
                              "and an audit trail.")
    app.state.settings = settings
    app.add_middleware(RequestGuard, settings=settings, bind_host=bind_host)  # before any route reads a body
    app.add_middleware(NoFraming)  # outermost: the guard's own refusals carry the headers too

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        # ASCII-escaped: the errors echo the input, which may hold text UTF-8 cannot encode (a lone surrogate);
        # an echoed input is cut short (a 5,000-character message need not come back whole).
        errors = [{**e, "input": _echo(e["input"])} if "input" in e else e for e in exc.errors()]
        body = json.dumps({"detail": _finite(jsonable_encoder(errors)), "message": invalid_summary(errors)},
                          ensure_ascii=True, default=repr, allow_nan=False)
        return Response(body, status_code=422, media_type="application/json")

    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        detail = exc.detail
        status = exc.status_code
        if status == 400 and detail == "There was an error parsing the body":
            if isinstance(exc.__cause__, RecursionError):  # valid JSON, arrays or objects nested too deep to read
                status, detail = 422, (f"the body's JSON is nested too deeply to read: arrays or objects about "
                                       f"{json_depth_limit()} levels inside one another or more (no request here "
                                       f"needs more than 10) / 请求体 JSON 嵌套层数过深（约 {json_depth_limit()} "
                                       "层及以上），无法读取")
            else:
                detail = ("the body could not be read: send UTF-8 JSON (Content-Type: application/json) / "
                          "请求体无法读取：请发送 UTF-8 编码的 JSON")
        elif exc.status_code == 413:  # a streamed body over the limit (one that declares its length is refused
            # before a byte is read, by Starlette's own plain "Content Too Large")
            detail = (f"the body is larger than {settings.max_body_bytes:,} bytes (STEWARD_MAX_BODY_BYTES): not "
                      f"read, nothing done / 请求体超过 {settings.max_body_bytes:,} 字节上限，未读取，未执行")
        return Response(json.dumps({"detail": detail}, ensure_ascii=False), status_code=status,
                        media_type="application/json", headers=getattr(exc, "headers", None))

    from agent.records.store import StoreUnavailable, ValueRefused

    @app.exception_handler(ValueRefused)
    async def value_refused(request: Request, exc: ValueRefused) -> Response:
        # The caller's value, not the store's health (a NUL character Postgres cannot hold): nothing was recorded.
        body = {"detail": f"not done: a value in the request cannot be stored: {exc} / 未执行：请求中的值无法存储"}
        return Response(json.dumps(body, ensure_ascii=True), status_code=422, media_type="application/json")

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(request: Request, exc: StoreUnavailable) -> Response:
        # Degraded, not dead: nothing was recorded, so nothing was done; /healthz says the same.
        body = {"detail": f"not done: {exc.problem.detail} / 未执行：数据存储不可写", "reason": exc.problem.reason}
        return Response(json.dumps(body), status_code=503, media_type="application/json")
    app.include_router(routes.router)
    app.include_router(chat.router)
    app.include_router(runbook_pages.router)
    from agent.alerts.route import alerts_router

    health_stores: dict[str, Callable[[], Any]] = {}  # a router's own stores, by name, for /healthz
    alerts = alerts_router(settings)
    app.include_router(alerts)
    from agent.api.changes import router as changes_router

    app.include_router(changes_router)
    app.state.runbooks_route = True  # the UI turns [rb:<id>] into links only when this is served
    extra = list(extra_routers)
    for router in extra:
        app.include_router(router)
    for router in (alerts, *extra):
        health_stores.update(getattr(router, "health_stores", {}))
    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/ui", include_in_schema=False)
    def ui() -> RedirectResponse:
        return RedirectResponse("/")

    return app


def chatops_wiring(settings: Settings) -> tuple[list[APIRouter], list[Callable[[StewardEvent], None]]]:
    """DingTalk / WeCom webhooks and approval cards, when any ChatOps setting is present (docs/chatops.md)."""
    configured = any([settings.dingtalk_webhook_url, settings.dingtalk_app_secret, settings.wecom_webhook_url,
                      settings.wecom_token])
    if not configured:
        return [], []
    from agent.chatops.cards import approval_card_listener
    from agent.chatops.notifier import routes_from_settings
    from agent.chatops.router import chatops_router

    # The router names its link and callback stores to /healthz itself (router.health_stores; agent/api/health.py).
    router = chatops_router(settings)
    listeners: list[Callable[[StewardEvent], None]] = []
    if settings.chatops_link_secret is not None:
        default_route, _ = routes_from_settings(settings)
        from agent.chatops.directory import UserDirectory

        listeners.append(approval_card_listener(default_route, router.links, settings.language,  # type: ignore[attr-defined]
                                                directory=UserDirectory.from_settings(settings), zone=settings.zone()))
    return [router], listeners


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def proxy_exposure_warning(settings: Settings, host: str) -> str | None:
    """The loud warning for proxy mode on a non-loopback address: the port takes identity headers from anyone."""
    if auth_mode(settings) != "proxy" or _is_loopback(host):
        return None
    proofs = [("its peer address is in STEWARD_TRUSTED_PROXIES", bool(settings.trusted_proxies)),
              ("it carries STEWARD_PROXY_SECRET", settings.proxy_secret is not None)]
    proof = " and ".join(text for text, on in proofs if on)
    return (f"WARNING: serving on {host} in proxy mode: anyone who reaches this port can send "
            f"{settings.proxy_user_header}; it is believed only when {proof}. Make the proxy the only way in, and "
            "have it strip the client's own user and groups headers (docs/access-control.md)")


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from core.durations import parse_duration

    updates: dict[str, Any] = {}
    if args.scenario is not None:
        updates["scenario"] = args.scenario
    if args.speed is not None:
        if args.speed < 0:
            print("error: --speed must be 0 (frozen clock) or more", flush=True)
            return 2
        updates["sim_speed"] = args.speed
    settings = settings.model_copy(update=updates)
    try:
        check_access_settings(settings)
    except ValueError as exc:
        print(f"error: {exc}", flush=True)
        return 2
    mode = auth_mode(settings)
    if mode == "local-dev" and not _is_loopback(args.host):
        print(f"error: refusing to serve on {args.host} without access control; set STEWARD_API_TOKENS or "
              "STEWARD_TRUST_PROXY_HEADERS=true (docs/access-control.md), or use --host 127.0.0.1", flush=True)
        return 2
    warning = proxy_exposure_warning(settings, args.host)
    if warning:
        print(warning, flush=True)
    # The demo's interesting part starts mid-afternoon: begin there unless told otherwise.
    start = args.start if args.start is not None else (0.0 if settings.scenario else parse_duration("210m"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import faulthandler

    faulthandler.enable()  # a fatal signal (SIGBUS, SIGSEGV) leaves a traceback on stderr, not silence
    routers, listeners = chatops_wiring(settings)
    app = create_app(settings, start_s=start, extra_routers=routers, listeners=listeners, bind_host=args.host)
    every = settings.sweep_cron or f"{settings.sweep_every_s:g}s"
    where = (f"simulated clock x{settings.sim_speed:g}; sweeps every {every} of cluster time"
             if settings.backend == "sim" else f"{settings.backend} cluster; sweeps every {every}")
    print(f"GPU Steward on http://{args.host}:{args.port}/  ({where})", flush=True)
    # proxy_headers=False: uvicorn's default takes X-Forwarded-For from any loopback peer as the client address,
    # so a `kubectl port-forward` or a sidecar could pose as STEWARD_TRUSTED_PROXIES; the peer is the TCP peer.
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", proxy_headers=False)
    return 0


def register_cli(subparsers: Any) -> None:
    from agent.cli.main import _duration

    serve = subparsers.add_parser(
        "serve", help="serve the web UI and API (default: the built-in demo cluster)",
        description="Serve the web UI (/), the HTTP API (/api) and /metrics, and sweep on schedule "
                    "(STEWARD_SWEEP_EVERY_S or STEWARD_SWEEP_CRON). The cluster is STEWARD_BACKEND (default: the "
                    "simulated demo); records live in STEWARD_DATA_DIR, which `steward approvals` and `steward sweep` "
                    "on a real cluster share.")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; any other needs STEWARD_API_TOKENS or "
                            "STEWARD_TRUST_PROXY_HEADERS, docs/access-control.md)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    serve.add_argument("--scenario", type=Path, help="scenario file to simulate (default: built-in demo)")
    serve.add_argument("--speed", type=float, help="simulated seconds per wall second (default 60)")
    serve.add_argument("--start", type=_duration, help="scenario time to start at (default: 210m (17:30) for the demo)")
    serve.set_defaults(handler=cmd_serve)
