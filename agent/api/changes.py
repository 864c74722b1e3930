"""`POST /api/changes` (approver) and `GET /api/changes` (viewer): change records with their impact and the alert
incidents that followed them (docs/changes.md). Each recorded change is also an audit entry (kind `change`), so
it shows on the audit timeline next to the incidents (kind `alert_incident`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field

from agent.api.auth import Approver, Viewer
from agent.records.change_impact import ImpactReport, impact, record_change, render_impact
from agent.records.changes import KINDS, Change, ChangeInput, ChangeStore, stamp

router = APIRouter(tags=["changes"])
NEARBY_H = 24.0  # incidents opened within this many hours after a change are listed next to it


class IncidentNote(BaseModel):
    incident: int | str
    at: datetime
    alertname: str
    subject: str | None
    severity: str | None


class ChangeView(BaseModel):
    change: Change
    impact: ImpactReport
    text: str = Field(description="The impact report for people, in the requested language.")
    incidents: list[IncidentNote] = Field(description="Alert incidents opened in the 24 h after the change.")


class ChangesPage(BaseModel):
    at: datetime
    changes: list[ChangeView]


class ChangeCreated(BaseModel):
    change: Change
    recorded: bool = Field(description="false: the same change (kind, target, time) was recorded before")


def _store(request: Request) -> ChangeStore:
    store = getattr(request.app.state.runtime.deps, "changes", None)
    if store is None:
        raise HTTPException(404, "change records are not configured on this steward / 未配置变更记录")
    return store  # type: ignore[no-any-return]


def _incidents(audit: Any, since: datetime, until: datetime) -> list[IncidentNote]:
    first: dict[Any, IncidentNote] = {}
    for e in audit.entries(kind="alert_incident", since=since, limit=2000, newest_first=False):
        key = e.data.get("incident")
        if key is not None and key not in first and e.at < until:
            first[key] = IncidentNote(incident=key, at=e.at, alertname=str(e.data.get("alertname") or "?"),
                                      subject=e.target, severity=e.data.get("severity"))
    return list(first.values())


@router.get("/api/changes", response_model=ChangesPage)
def list_changes(request: Request, who: Viewer, kind: Annotated[str | None, Query(max_length=20)] = None,
                 limit: Annotated[int, Query(ge=1, le=500)] = 50,
                 lang: Annotated[str, Query(pattern="^(en|zh)$")] = "en") -> ChangesPage:
    if kind is not None and kind not in KINDS:
        raise HTTPException(422, f"kind {kind!r}: use one of {', '.join(KINDS)} / 变更类型无效")
    rt = request.app.state.runtime
    store, audit, now = _store(request), rt.deps.audit, rt.deps.clock.now()
    views = []
    for c in store.changes(kind=kind, limit=limit):
        report = impact(store, c, now, audit)
        views.append(ChangeView(change=c, impact=report, text=render_impact(report, lang),
                                incidents=_incidents(audit, c.at, c.at + timedelta(hours=NEARBY_H))))
    return ChangesPage(at=now, changes=views)


@router.post("/api/changes", response_model=ChangeCreated, status_code=201,
             responses={200: {"model": ChangeCreated, "description": "already recorded (same kind, target and time)"},
                        422: {"description": "a field is invalid; the error names it"},
                        503: {"description": "the change store cannot be written"}})
def create_change(request: Request, body: ChangeInput, who: Approver) -> Any:
    rt = request.app.state.runtime
    store, now = _store(request), rt.deps.clock.now()
    at = body.at or now
    change, added = record_change(store, rt.deps.audit, key=f"recorded:{body.kind}:{body.target}:{stamp(at)}",
                                  kind=body.kind, target=body.target, description=body.description, at=at, now=now,
                                  source="recorded", by=who.name, run_id=f"api:{who.name}")
    result = ChangeCreated(change=change, recorded=added)
    if not added:
        from fastapi.responses import JSONResponse

        return JSONResponse(result.model_dump(mode="json"), status_code=200)
    return result
