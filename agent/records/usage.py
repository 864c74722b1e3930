"""Cost over a period from the audit log: per team, user, job and pool, waste by kind, savings, queue wait.

Every sweep records one `usage` entry (agent/graph/nodes/detect.py): the GPU jobs it saw and the pools with their
price and billing. A job holds its GPUs from one sample to the next; a gap longer than twice the usual one (the
steward was down) counts as the usual gap, so an outage neither inflates nor hides cost. Savings are
agent/records/savings.py's freed GPUs, counted inside the period; waste is the findings' own GPU-hours and cost.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from agent.records.audit import AuditLog
from agent.records.savings import freed_gpus
from core.observation import Observation


def usage_sample(obs: Observation, pool_of: dict[str, str | None]) -> dict[str, Any]:
    """What one sweep saw, compact: GPU jobs (running, stopping or pending) and pools."""
    jobs = []
    for j in obs.jobs:
        if j.gpus <= 0 or j.state not in ("running", "stopping", "pending"):
            continue
        jobs.append({"id": j.id, "uid": j.uid, "user": j.user, "team": j.project or j.namespace, "gpus": j.gpus,
                     "state": j.state, "pool": pool_of.get(j.node or "") or "",
                     "submitted": j.submitted_at.isoformat() if j.submitted_at else None,
                     "started": j.started_at.isoformat() if j.started_at else None})
    pools = {p.name: {"price": p.price_per_gpu_hour, "billing": p.billing, "gpus": p.nodes * p.gpus_per_node}
             for p in obs.pools}
    return {"jobs": jobs, "pools": pools, "currency": obs.currency}


class CostRow(BaseModel):
    name: str
    gpu_hours: float = 0.0
    cost: float = 0.0
    on_demand: float = 0.0  # of the cost, on on-demand (or spot) pools
    reserved: float = 0.0  # of the cost, on reserved pools (paid whether used or not)
    team: str = ""  # jobs and users: their team
    user: str = ""  # jobs: the owner
    gpus: int = 0  # jobs: GPUs requested


class WasteRow(BaseModel):
    kind: str
    findings: int
    gpu_hours: float
    cost: float


class QueueRow(BaseModel):
    team: str
    jobs: int
    mean_wait_s: float
    max_wait_s: float


class CreditRow(BaseModel):
    """Resource credits an owner got for jobs the steward stopped (policy `credit`, docs/cost-report.md)."""

    owner: str
    stops: int
    gpus: int  # GPUs reclaimed by those stops
    gpu_hours: float  # the credit: reclaimed GPUs x the grant's duration
    kind: str  # priority | quota_grace (the latest grant's)
    priority_bump: int = 0  # kind priority: the bump each grant gives


class Suggestion(BaseModel):
    user: str
    job: str
    kind: str
    gpus: int  # requested
    used: int  # working (overprovisioned) or 0
    hours: float  # how long the finding lasted
    cost: float


class CostReport(BaseModel):
    since: datetime
    until: datetime
    currency: str = "USD"
    sweeps: int = 0
    gpu_hours: float = 0.0
    cost: float = 0.0
    on_demand: float = 0.0
    reserved: float = 0.0
    by_team: list[CostRow] = []
    by_user: list[CostRow] = []
    by_job: list[CostRow] = []
    by_pool: list[CostRow] = []
    pool_capacity: list[CostRow] = []  # every pool GPU x time x price: what the pools cost, used or not
    waste: list[WasteRow] = []
    waste_gpu_hours: float = 0.0
    waste_cost: float = 0.0
    saved_gpu_hours: float = 0.0
    saved_cost: float = 0.0
    saving_actions: int = 0
    savings_timeline: list[tuple[datetime, float]] = []  # cumulative money saved in the period
    queue: list[QueueRow] = []
    suggestions: list[Suggestion] = []
    credits: list[CreditRow] = []


def _ts(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _add(rows: dict[str, CostRow], key: str, hours: float, cost: float, billing: str, **kw: Any) -> None:
    row = rows.get(key) or CostRow(name=key, **kw)
    row.gpu_hours += hours
    row.cost += cost
    if billing == "reserved":
        row.reserved += cost
    else:
        row.on_demand += cost
    rows[key] = row


def _rounded(rows: dict[str, CostRow], limit: int | None = None) -> list[CostRow]:
    out = sorted(rows.values(), key=lambda r: (-r.cost, -r.gpu_hours, r.name))[:limit]
    return [r.model_copy(update={k: round(getattr(r, k), 2) for k in ("gpu_hours", "cost", "on_demand", "reserved")})
            for r in out]


def build_report(audit: AuditLog, since: datetime, until: datetime, currency: str | None = None) -> CostReport:
    samples = audit.entries(kind="usage", since=since, limit=1_000_000, newest_first=False)
    samples = [e for e in samples if e.at <= until]
    cur = currency or next((str(e.data.get("currency")) for e in samples if e.data.get("currency")), "USD")
    since = max(since, samples[0].at) if samples else since  # the period the samples cover
    report = CostReport(since=since, until=until, currency=cur, sweeps=len(samples))
    gaps = [(b.at - a.at).total_seconds() for a, b in zip(samples, samples[1:], strict=False) if b.at > a.at]
    usual = statistics.median(gaps) if gaps else 300.0
    teams: dict[str, CostRow] = {}
    users: dict[str, CostRow] = {}
    jobs: dict[str, CostRow] = {}
    pools: dict[str, CostRow] = {}
    capacity: dict[str, CostRow] = {}
    waits: dict[str, dict[str, float]] = defaultdict(dict)  # team -> job uid -> wait
    for i, e in enumerate(samples):
        nxt = samples[i + 1].at if i + 1 < len(samples) else None
        dt = (nxt - e.at).total_seconds() if nxt is not None else usual
        dt = min(dt, 2 * usual) / 3600.0
        prices = e.data.get("pools") or {}
        for name, p in prices.items():
            gpus = int(p.get("gpus") or 0)
            _add(capacity, name, gpus * dt, gpus * dt * float(p.get("price") or 0.0), str(p.get("billing")))
        for j in e.data.get("jobs") or []:
            started, submitted = _ts(j.get("started")), _ts(j.get("submitted"))
            team = str(j.get("team") or "")
            if j.get("state") != "pending" and started is not None and submitted is not None:
                waits[team].setdefault(str(j.get("uid") or j["id"]), max(0.0, (started - submitted).total_seconds()))
            if j.get("state") == "pending":
                continue
            pool = str(j.get("pool") or "")
            p = prices.get(pool) or {}
            hours = int(j["gpus"]) * dt
            cost, billing = hours * float(p.get("price") or 0.0), str(p.get("billing") or "on-demand")
            user = str(j.get("user") or "")
            _add(teams, team, hours, cost, billing)
            _add(users, user, hours, cost, billing, team=team)
            _add(jobs, str(j["id"]), hours, cost, billing, team=team, user=user, gpus=int(j["gpus"]))
            _add(pools, pool or "(no pool)", hours, cost, billing)
    report.by_team, report.by_user = _rounded(teams), _rounded(users)
    report.by_job, report.by_pool, report.pool_capacity = _rounded(jobs, 50), _rounded(pools), _rounded(capacity)
    report.gpu_hours = round(sum(r.gpu_hours for r in teams.values()), 2)
    report.cost = round(sum(r.cost for r in teams.values()), 2)
    report.on_demand = round(sum(r.on_demand for r in teams.values()), 2)
    report.reserved = round(sum(r.reserved for r in teams.values()), 2)
    report.queue = sorted((QueueRow(team=t, jobs=len(w), mean_wait_s=round(statistics.fmean(w.values()), 1),
                                    max_wait_s=round(max(w.values()), 1)) for t, w in waits.items() if w and max(w.values()) > 0),
                          key=lambda q: -q.max_wait_s)
    _waste(report, audit, since, until, jobs)
    _savings(report, audit, since, until)
    _credits(report, audit, since, until)
    return report


def _waste(report: CostReport, audit: AuditLog, since: datetime, until: datetime, jobs: dict[str, CostRow]) -> None:
    """Waste by kind, each stretch counted once. A detector's `since` may slide with its window, so findings of one
    target and kind belong to one stretch while each begins no later than the previous sweep saw it; a stretch
    wastes its latest GPUs from its earliest start to its last sighting, at the price its findings carry."""
    by_target: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for e in audit.entries(kind="finding", since=since, limit=1_000_000, newest_first=False):
        kind = str(e.data.get("kind") or e.status)
        if e.at <= until and kind not in PLAN_KINDS:
            by_target[(e.target or "", kind)].append(e)
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    best: dict[tuple[str, str], Suggestion] = {}
    for (target, kind), entries in by_target.items():
        stretches: list[tuple[datetime, Any]] = []  # (earliest start, last entry)
        for e in entries:
            began = _ts(e.data.get("since")) or e.at
            if stretches and began <= stretches[-1][1].at:
                stretches[-1] = (min(stretches[-1][0], began), e)
            else:
                stretches.append((began, e))
        for first, e in stretches:
            began = max(first, since)  # the waste counted is the period's; the suggestion says how long it lasted
            measured, cost = float(e.data.get("waste_gpu_hours") or 0.0), float(e.data.get("waste_cost") or 0.0)
            gpus = int(e.data.get("gpus") or 0)
            hours = gpus * max(0.0, (e.at - began).total_seconds()) / 3600.0
            cost = hours * (cost / measured) if measured > 0 else 0.0
            row = by_kind[kind]
            row[0] += 1
            row[1] += hours
            row[2] += cost
            job = jobs.get(target)
            if job is None or kind not in SUGGESTED:
                continue
            lasted = max(0.0, (e.at - first).total_seconds() / 3600.0)  # the report read "for 1h" of a 3h35m hang
            used = max(0, job.gpus - gpus) if kind == "overprovisioned" else 0
            sug = Suggestion(user=job.user, job=target, kind=kind, gpus=job.gpus, used=used, hours=round(lasted, 2),
                             cost=round(cost, 2))
            if (target, kind) not in best or sug.hours > best[(target, kind)].hours:
                best[(target, kind)] = sug
    report.waste = sorted((WasteRow(kind=k, findings=int(v[0]), gpu_hours=round(v[1], 2), cost=round(v[2], 2))
                           for k, v in by_kind.items()), key=lambda w: (-w.cost, -w.gpu_hours, w.kind))
    report.waste_gpu_hours = round(sum(w.gpu_hours for w in report.waste), 2)
    report.waste_cost = round(sum(w.cost for w in report.waste), 2)
    report.suggestions = sorted(best.values(), key=lambda s: (-s.cost, -s.hours, s.job))[:30]


# Findings that plan capacity rather than measure waste (docs/forecast.md): not counted as waste.
PLAN_KINDS = frozenset({"pool_scale_up", "quiet_fill"})


def _credits(report: CostReport, audit: AuditLog, since: datetime, until: datetime) -> None:
    """Per owner, the credits granted in the period (audit kind `credit`, one per stop)."""
    rows: dict[str, CreditRow] = {}
    for e in audit.entries(kind="credit", since=since, limit=1_000_000, newest_first=False):
        if e.at > until:
            continue
        owner = str(e.data.get("owner") or e.target or "?")
        row = rows.get(owner) or CreditRow(owner=owner, stops=0, gpus=0, gpu_hours=0.0, kind="")
        row.stops += 1
        row.gpus += int(e.data.get("gpus") or 0)
        row.gpu_hours = round(row.gpu_hours + float(e.data.get("gpu_hours") or 0.0), 2)
        row.kind = str(e.data.get("kind") or "")
        row.priority_bump = int(e.data.get("priority_bump") or 0)
        rows[owner] = row
    report.credits = sorted(rows.values(), key=lambda r: (-r.gpu_hours, r.owner))


# Finding kinds a person can act on next time, with a suggestion of their own (agent/graph/cost_report.py words).
SUGGESTED = frozenset({"overprovisioned", "idle", "zombie", "doomed", "crash_loop", "stuck_pending"})


def _savings(report: CostReport, audit: AuditLog, since: datetime, until: datetime) -> None:
    """GPUs an executed action freed count from when they were freed (or the period's start) to its end."""
    freed = [(max(at, since), gpus, price) for at, gpus, price in freed_gpus(audit, until) if at <= until]
    report.saving_actions = sum(1 for at, g, _ in freed if at >= since and g > 0)
    hours = sum(g * (until - at).total_seconds() / 3600.0 for at, g, _ in freed)
    money = sum(g * (until - at).total_seconds() / 3600.0 * p for at, g, p in freed)
    report.saved_gpu_hours, report.saved_cost = round(hours, 2), round(money, 2)
    points = 12
    span = (until - since) / points
    timeline = []
    for k in range(points + 1):
        t = since + span * k
        timeline.append((t, round(sum(g * max(0.0, (t - at).total_seconds()) / 3600.0 * p for at, g, p in freed), 2)))
    report.savings_timeline = timeline
