"""POST /api/alerts: the Alertmanager webhook receiver (docs/alerts.md).

It authenticates by its own bearer token (STEWARD_ALERT_WEBHOOK_TOKEN, Alertmanager's
http_config.authorization), checked before the body is read; agent/api/guard.py lets the path through to it.
The body is bounded by the app's max_body_size. The envelope is validated first (not a v4 webhook: 422 naming the
field), then each alert on its own: the valid ones are taken and the rejected ones listed in the reply (index,
field, reason) and audited, so one malformed alert does not lose the others; 422 when none is valid.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from agent.alerts.incidents import error_field, parse_webhook
from agent.alerts.intake import AlertIntake
from agent.alerts.store import IncidentStore
from agent.config.settings import Settings

PATH = "/api/alerts"


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
                                  422: {"description": "not an Alertmanager v4 webhook, or no alert in it is "
                                                        "valid; names the field"}})
    async def receive_alerts(request: Request) -> dict[str, Any]:
        if token is None:
            raise HTTPException(404, "alert intake is not configured (STEWARD_ALERT_WEBHOOK_TOKEN) / 未配置告警接入")
        sent = request.headers.getlist("authorization")
        scheme, _, given = (sent[0] if len(sent) == 1 else "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
            raise HTTPException(401, "missing or wrong bearer token / 告警 webhook 令牌缺失或错误",
                                headers={"WWW-Authenticate": "Bearer"})
        try:
            payload, rejected = parse_webhook(await request.body())
        except ValidationError as exc:
            first = exc.errors()[0]
            raise HTTPException(422, f"not an Alertmanager v4 webhook: field '{error_field(first)}': {first['msg']} "
                                     f"/ 不是 Alertmanager v4 webhook：字段 '{error_field(first)}' 无效") from None
        rt = request.app.state.runtime
        now = rt.deps.clock.now()
        received = len(payload.alerts) + len(rejected) if payload else len(rejected)
        refused = [r.model_dump() for r in rejected]
        if rejected:
            await run_in_threadpool(intake(request).refuse, rejected, received, now, payload.groupKey if payload else "")
        if payload is None:
            shown = "; ".join(f"field '{r.field}' of alert {r.alertname or '?'} (fingerprint {r.fingerprint or '?'}): "
                              f"{r.reason}" for r in rejected[:3])
            raise HTTPException(422, f"no alert of the webhook is valid ({len(rejected)} refused): {shown} "
                                     f"/ 告警推送中没有一条有效告警（{len(rejected)} 条被拒）：字段 "
                                     f"{', '.join(repr(r.field) for r in rejected[:3])} 无效")
        incidents = await run_in_threadpool(intake(request).receive, payload, now)
        return {"received": received, "taken": len(payload.alerts), "rejected": refused, "incidents": incidents}

    # The incident store, once the first webhook opened it: /healthz reports its problem (agent/api/health.py).
    router.health_stores = {"alerts": lambda: held["intake"].store if "intake" in held else None}  # type: ignore[attr-defined]
    return router
