"""GPU-hours and money reclaimed by executed actions over time, and waste by team, from the audit log."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from pydantic import BaseModel, Field

from agent.records.audit import AuditLog
from core.actions import Finding


class SavingsPoint(BaseModel):
    at: datetime
    reclaimed_gpu_hours: float = Field(description="Cumulative GPU-hours reclaimed by actions up to this time.")
    reclaimed_money: float


class TeamWaste(BaseModel):
    team: str
    gpu_hours: float
    money: float
    findings: int


class Savings(BaseModel):
    currency: str
    at: datetime
    reclaimed_gpu_hours: float
    reclaimed_money: float
    actions: int = Field(description="Executed stops and resizes that free GPUs.")
    timeline: list[SavingsPoint]
    waste_by_team: list[TeamWaste] = Field(description="Waste the latest sweep found, by team/project.")


FREEING_ACTIONS = ("terminate", "force_terminate", "resize_pool")


def _price(audit: AuditLog, target: str, fallback: float) -> float:
    """Price per GPU-hour seen on the target's findings (backend-agnostic: detectors priced them)."""
    for e in audit.entries(kind="finding", target=target, limit=20):
        hours, cost = e.data.get("waste_gpu_hours") or 0, e.data.get("waste_cost") or 0
        if hours:
            return float(cost) / float(hours)
    return fallback


def team_of(f: Finding) -> str:
    if f.target_type == "job" and "/" in f.target:
        return f.target.split("/", 1)[0]
    return f"{f.target_type}:{f.target}"


def compute_savings(audit: AuditLog, findings: list[Finding], now: datetime, currency: str,
                    points: int = 24, default_price: float = 0.0) -> Savings:
    """GPUs an action freed count from its execution until now (the job would otherwise still hold them)."""
    # A job's GPUs are freed once: when a graceful stop was ignored, by the forced stop that followed it.
    last_stop: dict[str, tuple[datetime, int, float]] = {}
    resizes: list[tuple[datetime, int, float]] = []
    for e in audit.entries(kind="execution", status="executed", limit=100_000, newest_first=False):
        gpus = int(e.data.get("gpus") or 0)
        if e.action in FREEING_ACTIONS and gpus > 0 and e.at <= now:
            item = (e.at, gpus, _price(audit, e.target or "", default_price))
            if e.action == "resize_pool":
                resizes.append(item)
            else:
                last_stop[e.target or ""] = item
    freed = sorted([*last_stop.values(), *resizes])

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
    for f in findings:
        row = by_team[team_of(f)]
        row[0] += f.waste_gpu_hours
        row[1] += f.waste_cost
        row[2] += 1
    teams = sorted((TeamWaste(team=k, gpu_hours=round(v[0], 2), money=round(v[1], 2), findings=int(v[2]))
                    for k, v in by_team.items()), key=lambda t: -t.money)
    return Savings(currency=currency, at=now, reclaimed_gpu_hours=round(hours, 2), reclaimed_money=round(money, 2),
                   actions=len(freed), timeline=timeline, waste_by_team=teams)
