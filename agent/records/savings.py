"""GPU-hours and money reclaimed by executed actions over time, and waste by team, from the audit log."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from agent.records.audit import AuditEntry, AuditLog
from core.actions import STOP_ACTIONS, Finding


class SavingsPoint(BaseModel):
    at: datetime
    reclaimed_gpu_hours: float = Field(description="Cumulative GPU-hours reclaimed by actions up to this time.")
    reclaimed_money: float


class TeamWaste(BaseModel):
    team: str
    gpu_hours: float
    money: float
    findings: int


class PoolWaste(BaseModel):
    pool: str = Field(description="Pool (or node) name.")
    target_type: str = Field(description="pool or node")
    gpu_hours: float
    money: float
    findings: int


class Savings(BaseModel):
    currency: str
    at: datetime
    reclaimed_gpu_hours: float
    reclaimed_money: float
    actions: int = Field(description="Executed stops and resizes that freed GPUs (a stop once its job is gone).")
    timeline: list[SavingsPoint]
    waste_by_team: list[TeamWaste] = Field(description="Waste the latest sweep found on jobs, by team (namespace).")
    waste_by_pool: list[PoolWaste] = Field(default_factory=list,
                                           description="Waste the latest sweep found on pools and nodes.")


FREEING_ACTIONS = ("terminate", "force_terminate", "resize_pool")
CONFIRMED = "stop_confirmed"  # audit kind: a signalled job was later seen gone


def _price(audit: AuditLog, target: str, fallback: float) -> float:
    """Price per GPU-hour seen on the target's findings (backend-agnostic: detectors priced them)."""
    for e in audit.entries(kind="finding", target=target, limit=20):
        hours, cost = e.data.get("waste_gpu_hours") or 0, e.data.get("waste_cost") or 0
        if hours:
            return float(cost) / float(hours)
    return fallback


def team_of(f: Finding) -> str | None:
    """The team a job finding belongs to: its project (Slurm account) or namespace, as the cost report bills it;
    for a finding recorded before it carried one, the id's first part. None for pools and nodes."""
    if f.target_type != "job":
        return None
    if f.team:
        return f.team
    return f.target.split("/", 1)[0] if "/" in f.target else (f.owner or f.target)


def _gone(detail: str) -> bool:
    """Whether a stop's outcome says the job is gone ("stopped: ..."), not just signalled ("stopping: ...")."""
    return detail.startswith("stopped")


def freed_gpus(audit: AuditLog, now: datetime, default_price: float = 0.0) -> list[tuple[datetime, int, float]]:
    """(from when, GPUs, price per GPU-hour) for each thing an executed action freed, oldest first.

    A stop counts once per job (its uid), from the first audit entry that shows the job gone: a stop that
    ended it, or a `stop_confirmed` entry after a SIGTERM it left on its own. A SIGTERM the job ignored frees
    nothing. Entries are only appended, so a counted start never moves later: the totals never decrease.
    """
    stops: dict[str, tuple[datetime, int, float]] = {}
    resizes: list[tuple[datetime, int, float]] = []
    entries = [*audit.entries(kind="execution", status="executed", limit=100_000, newest_first=False),
               *audit.entries(kind=CONFIRMED, limit=100_000, newest_first=False)]
    for e in sorted(entries, key=lambda e: e.seq):
        gpus = int(e.data.get("gpus") or 0)
        added = int(e.data.get("added_gpus") or 0)
        if e.action == "resize_pool" and added > 0 and e.at <= now:
            # A planned scale-up back (docs/forecast.md) ends what its scale-down freed: the GPUs count again.
            resizes.append((e.at, -added, _price(audit, e.target or "", default_price)))
            continue
        if e.action not in FREEING_ACTIONS or gpus <= 0 or e.at > now:
            continue
        item = (e.at, gpus, _price(audit, e.target or "", default_price))
        if e.action == "resize_pool":
            resizes.append(item)
        elif e.kind == CONFIRMED or _gone(str(e.data.get("detail") or "")):
            stops.setdefault(str(e.data.get("target_uid") or e.target or ""), item)
    return sorted([*stops.values(), *resizes])


def unconfirmed_stops(audit: AuditLog, now: datetime,
                      lookback: timedelta = timedelta(days=7)) -> list[AuditEntry]:
    """Executed stops whose job was only signalled ("stopping") and is not yet known to be gone."""
    since = now - lookback
    known = {str(e.data.get("target_uid") or e.target or "")
             for kind in ("execution", CONFIRMED) for e in audit.entries(kind=kind, since=since, limit=100_000)
             if e.kind == CONFIRMED or (e.status == "executed" and _gone(str(e.data.get("detail") or "")))}
    out: dict[str, AuditEntry] = {}
    for e in audit.entries(kind="execution", status="executed", since=since, limit=100_000, newest_first=False):
        key = str(e.data.get("target_uid") or e.target or "")
        if e.action in STOP_ACTIONS and int(e.data.get("gpus") or 0) > 0 and key not in known:
            out.setdefault(key, e)
    return list(out.values())


def confirm_stops(audit: AuditLog, scheduler: Any, now: datetime, run_id: str) -> list[int]:
    """Audit `stop_confirmed` for each signalled job the scheduler no longer runs (gone, ended, or replaced by
    another job under the same name); the seqs written. Idempotent: a confirmed job is not looked at again."""
    written = []
    for e in unconfirmed_stops(audit, now):
        job = scheduler.get_job(e.target or "")
        uid = e.data.get("target_uid")
        if job is None:
            why = "the job no longer exists"
        elif uid and job.uid != uid:
            why = f"{e.target} is another job now (uid {job.uid})"
        elif job.state in ("completed", "failed", "cancelled"):
            why = f"the job is {job.state}"
        else:
            continue
        written.append(audit.record(CONFIRMED, at=now, run_id=run_id, target=e.target, action=e.action,
                                    level=e.level, status="gone", reason=f"{e.action} took effect: {why}",
                                    data={"gpus": e.data.get("gpus"), "target_uid": uid, "stop_seq": e.seq,
                                          "action_id": e.data.get("action_id")}))
    return written


def compute_savings(audit: AuditLog, findings: list[Finding], now: datetime, currency: str,
                    points: int = 24, default_price: float = 0.0) -> Savings:
    """GPUs an action freed count from the time they were freed until now (the job would otherwise hold them)."""
    freed = freed_gpus(audit, now, default_price)

    def totals(t: datetime) -> tuple[float, float]:
        hours = money = 0.0
        for at, gpus, price in freed:
            if at <= t:
                h = gpus * (t - at).total_seconds() / 3600.0
                hours, money = hours + h, money + h * price
        return hours, money

    timeline: list[SavingsPoint] = []
    if freed:
        first = freed[0][0]
        span = (now - first) / max(1, points - 1)
        for i in range(points):
            t = first + span * i if i < points - 1 else now
            h, m = totals(t)
            timeline.append(SavingsPoint(at=t, reclaimed_gpu_hours=round(h, 2), reclaimed_money=round(m, 2)))
    hours, money = totals(now)
    by_team: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    by_pool: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for f in findings:
        team = team_of(f)
        row = by_team[team] if team is not None else by_pool[(f.target, f.target_type)]
        row[0] += f.waste_gpu_hours
        row[1] += f.waste_cost
        row[2] += 1
    teams = sorted((TeamWaste(team=k, gpu_hours=round(v[0], 2), money=round(v[1], 2), findings=int(v[2]))
                    for k, v in by_team.items()), key=lambda t: -t.money)
    pools = sorted((PoolWaste(pool=k[0], target_type=k[1], gpu_hours=round(v[0], 2), money=round(v[1], 2),
                              findings=int(v[2])) for k, v in by_pool.items()), key=lambda p: -p.money)
    return Savings(currency=currency, at=now, reclaimed_gpu_hours=round(hours, 2), reclaimed_money=round(money, 2),
                   actions=sum(1 for _, gpus, _ in freed if gpus > 0), timeline=timeline, waste_by_team=teams, waste_by_pool=pools)
