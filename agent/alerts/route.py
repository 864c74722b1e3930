"""POST /api/alerts: the Alertmanager webhook receiver (docs/alerts.md).

It authenticates by its own bearer token (STEWARD_ALERT_WEBHOOK_TOKEN, Alertmanager's
http_config.authorization), checked before the body is read; agent/api/guard.py lets the path through to it.
The body is bounded by the app's max_body_size.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from agent.alerts.incidents import AlertmanagerPayload
from agent.alerts.intake import AlertIntake
from agent.alerts.store import IncidentStore
from agent.config.settings import Settings

PATH = "/api/alerts"


def _field(error: Any) -> str:
    return ".".join(str(part) for part in error["loc"]) or "body"


def alerts_router(settings: Settings) -> APIRouter:
    """The receiver; incidents live in data_dir/alerts.sqlite (opened on the first accepted webhook)."""
    router = APIRouter(tags=["alerts"])
    token = settings.alert_webhook_token.get_secret_value().encode() if settings.alert_webhook_token else None
    held: dict[str, AlertIntake] = {}

    def intake(request: Request) -> AlertIntake:
        if "intake" not in held:
            runtime = request.app.state.runtime

            def investigator(plan: Any, runbook: str | None, proposes: frozenset[str]) -> Any:
                with runtime.graph_lock:  # never interleaved with a sweep or an approval
                    return runtime.service.investigate(plan, runbook, proposes)

            held["intake"] = AlertIntake(IncidentStore(settings.store("alerts")),
                                         notifier=lambda: runtime.deps.notifier, audit=lambda: runtime.deps.audit,
                                         observation=runtime.newest_observation, language=settings.language,
                                         investigator=investigator)
        return held["intake"]

    @router.post(PATH, responses={401: {"description": "missing or wrong bearer token"},
                                  404: {"description": "STEWARD_ALERT_WEBHOOK_TOKEN is not set"},
                                  422: {"description": "not an Alertmanager v4 webhook; names the field"}})
    async def receive_alerts(request: Request) -> dict[str, Any]:
        if token is None:
            raise HTTPException(404, "alert intake is not configured (STEWARD_ALERT_WEBHOOK_TOKEN) / 未配置告警接入")
        sent = request.headers.getlist("authorization")
        scheme, _, given = (sent[0] if len(sent) == 1 else "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
            raise HTTPException(401, "missing or wrong bearer token / 告警 webhook 令牌缺失或错误",
                                headers={"WWW-Authenticate": "Bearer"})
        try:
            payload = AlertmanagerPayload.model_validate_json(await request.body())
        except ValidationError as exc:
            first = exc.errors()[0]
            raise HTTPException(422, f"not an Alertmanager v4 webhook: field '{_field(first)}': {first['msg']} "
                                     f"/ 不是 Alertmanager v4 webhook：字段 '{_field(first)}' 无效") from None
        rt = request.app.state.runtime
        incidents = await run_in_threadpool(intake(request).receive, payload, rt.deps.clock.now())
        return {"received": len(payload.alerts), "incidents": incidents}

    # The incident store, once the first webhook opened it: /healthz reports its problem (agent/api/health.py).
    router.health_stores = {"alerts": lambda: held["intake"].store if "intake" in held else None}  # type: ignore[attr-defined]
    return router
