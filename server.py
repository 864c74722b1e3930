"""The FastAPI app (chat UI, approvals, findings, audit, savings, metrics, sweeps) and `steward serve`."""

from __future__ import annotations

import argparse
import ipaddress
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from agent.api.auth import auth_mode
from agent.api.runtime import StewardEvent, StewardRuntime
from agent.config.settings import Settings

log = logging.getLogger("steward.server")
WEB_DIR = Path(__file__).parent / "agent" / "web"


def create_app(settings: Settings, *, service: StewardRuntime | None = None, extra_routers: Iterable[APIRouter] = (),
               listeners: Iterable[Callable[[StewardEvent], None]] = (), notifier: Any = None,
               chat_model: Any = None, start_s: float | None = None, speed: float | None = None,
               run_scheduler: bool = True) -> FastAPI:
    """The app; nothing starts until its lifespan does. `service` defaults to the simulated demo cluster.

    extra_routers: e.g. the ChatOps webhooks (they authenticate by platform signature, not by our tokens).
    listeners: called on sweep_finished / approval_requested / approval_answered (ChatOps notifications).
    notifier: replaces the simulated inbox notifier when the runtime is built here.
    """

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

    app = FastAPI(title="GPU Steward", version="0.1.0", lifespan=lifespan,
                  description="Finds and reclaims wasted GPUs through a deterministic guardrail, with approvals "
                              "and an audit trail.")
    app.state.settings = settings
    app.include_router(routes.router)
    app.include_router(chat.router)
    app.include_router(runbook_pages.router)
    app.state.runbooks_route = True  # the UI turns [rb:<id>] into links only when this is served
    for router in extra_routers:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")

    @app.get("/", include_in_schema=False)
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

    router = chatops_router(settings)
    listeners: list[Callable[[StewardEvent], None]] = []
    if settings.chatops_link_secret is not None:
        default_route, _ = routes_from_settings(settings)
        from agent.chatops.directory import UserDirectory

        listeners.append(approval_card_listener(default_route, router.links, settings.language,  # type: ignore[attr-defined]
                                                directory=UserDirectory.from_settings(settings)))
    return [router], listeners


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    if auth_mode(settings) == "local-dev" and not _is_loopback(args.host):
        print(f"error: refusing to serve on {args.host} without access control; set STEWARD_API_TOKENS or "
              "STEWARD_TRUST_PROXY_HEADERS=true (docs/access-control.md), or use --host 127.0.0.1", flush=True)
        return 2
    # The demo's interesting part starts mid-afternoon: begin there unless told otherwise.
    start = args.start if args.start is not None else (0.0 if settings.scenario else parse_duration("210m"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    routers, listeners = chatops_wiring(settings)
    app = create_app(settings, start_s=start, extra_routers=routers, listeners=listeners)
    print(f"GPU Steward on http://{args.host}:{args.port}/  (simulated clock x{settings.sim_speed:g}; "
          f"sweeps every {settings.sweep_cron or f'{settings.sweep_every_s:g}s'} of cluster time)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def register_cli(subparsers: Any) -> None:
    from agent.cli.main import _duration

    serve = subparsers.add_parser("serve", help="serve the web UI and API (default: the built-in demo cluster)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--scenario", type=Path, help="scenario file to simulate (default: built-in demo)")
    serve.add_argument("--speed", type=float, help="simulated seconds per wall second (default 60)")
    serve.add_argument("--start", type=_duration, help="scenario time to start at (default: 210m (17:30) for the demo)")
    serve.set_defaults(handler=cmd_serve)
