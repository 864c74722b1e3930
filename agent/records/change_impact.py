"""Changes detected at each sweep, and each change's impact: the same span of hours after it against before it
(docs/changes.md). Pure over its inputs except for the change store and the audit log it is handed.

Rule (one sentence, also in the docs): a measure has **risen** after a change when the span after it holds at least
MIN_EVENTS events and at least RISE_FACTOR times as many as the same span before it (queue wait: at least
MIN_EVENTS jobs started after it, and their mean wait is at least RISE_FACTOR times the mean before and at least
MIN_WAIT_RISE_S longer); a change with any risen measure is flagged, once, with the numbers and the rollback
runbook.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from agent.config.policy import Policy
from agent.records.audit import AuditLog
from agent.records.changes import Change, ChangeStore, stamp
from core.cluster import JobInfo
from core.observation import Observation
from core.text import one_line

MIN_EVENTS = 3
RISE_FACTOR = 2.0
MIN_WAIT_RISE_S = 300.0
SPAN_MAX_S = 24 * 3600.0  # at most a day after a change is compared with the day before it
SPAN_MIN_S = 1800.0  # a change younger than half an hour has no impact report yet
RETAIN_SIGNALS_S = 14 * 86400.0
RUNBOOK = "change-rollback"

# Node labels that carry the driver and CUDA versions: GPU feature discovery (newer, then older names), and the
# DCGM exporter's DRIVER_VERSION where an adapter copies it onto the node.
DRIVER_FULL = ("nvidia.com/cuda.driver-version.full", "DRIVER_VERSION", "nvidia.com/driver.version")
DRIVER_PARTS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
CUDA_FULL = ("nvidia.com/cuda.runtime-version.full",)
CUDA_PARTS = ("nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor")
WORKLOAD_LABELS = ("app.kubernetes.io/name", "app", "job-name")


def _version(labels: dict[str, str], full: tuple[str, ...], parts: tuple[str, ...]) -> str | None:
    for key in full:
        if labels.get(key):
            return labels[key]
    found = [labels.get(k) for k in parts]
    if found[0]:
        return ".".join(p for p in found if p)
    return None


def policy_hash(policy: Policy) -> str:
    return hashlib.sha256(policy.model_dump_json().encode()).hexdigest()[:12]


def workload(job: JobInfo) -> str:
    """A job's workload (its image is tracked per workload): namespace / app label, else the job id."""
    name = next((job.labels[k] for k in WORKLOAD_LABELS if job.labels.get(k)), None)
    return f"{job.namespace}/{name}" if name else job.id


# -- detection ----------------------------------------------------------------------------------------------
def _audit_change(audit: AuditLog, change: Change, run_id: str, now: datetime) -> None:
    en = f"{change.source} change ({change.kind}) on {change.target}: {change.description}".rstrip(": ")
    zh = (f"{'检测到' if change.source == 'detected' else '记录'}变更（{change.kind}）：{change.target}"
          + (f"：{change.description}" if change.description else ""))
    audit.record("change", at=now, run_id=run_id, target=change.target, action=change.kind, status=change.source,
                 reason=en, data={"change": change.id, "key": change.key, "kind": change.kind, "by": change.by,
                                  "change_at": change.at.isoformat(), "reason_zh": zh})


def record_change(store: ChangeStore, audit: AuditLog | None, *, key: str, kind: str, target: str,
                  description: str, at: datetime, now: datetime, source: str, by: str, run_id: str,
                  detail: dict[str, Any] | None = None) -> tuple[Change, bool]:
    """Record (once by `key`) and audit a new change, so it shows on the audit timeline."""
    change, added = store.record(key=key, kind=kind, target=target, description=description, at=at, now=now,
                                 source=source, by=by, detail=detail)  # type: ignore[arg-type]
    if added and audit is not None:
        _audit_change(audit, change, run_id, now)
    return change, added


def _versioned(store: ChangeStore, audit: AuditLog, kind: str, node: str, version: str, at: datetime,
               run_id: str, out: list[Change]) -> None:
    seen_key = f"{kind}@{node}"
    before = store.seen(seen_key)
    if before == version:
        return
    store.see(seen_key, version, at)
    if before is None:
        return  # the first reading of this node is its baseline, not a change
    what = "NVIDIA driver" if kind == "driver" else "CUDA"
    change, added = record_change(store, audit, key=f"{kind}:{version}", kind=kind, target=f"{what} {version}",
                                  description=f"{what} {before} -> {version} (node labels)", at=at, now=at,
                                  source="detected", by="steward", run_id=run_id,
                                  detail={"from": before, "to": version, "nodes": [node]})
    if added:
        out.append(change)
    elif node not in change.detail.get("nodes", []):
        store.add_detail(change.id, {**change.detail, "nodes": [*change.detail.get("nodes", []), node]})


def detect(store: ChangeStore, audit: AuditLog, obs: Observation, policy: Policy, run_id: str) -> list[Change]:
    """New driver / CUDA versions on nodes, new images on workloads, and a policy edit, each recorded once.

    The first time the steward sees a node, a workload or the policy is its baseline, so a new installation
    does not report everything it finds as a change.
    """
    at, out = obs.at, list[Change]()
    for node in obs.nodes:
        driver = _version(node.labels, DRIVER_FULL, DRIVER_PARTS)
        if driver:
            _versioned(store, audit, "driver", node.name, driver, at, run_id, out)
        cuda = _version(node.labels, CUDA_FULL, CUDA_PARTS)
        if cuda:
            _versioned(store, audit, "cuda", node.name, cuda, at, run_id, out)
    for job in obs.jobs:
        if not job.image or job.state not in ("running", "stopping"):
            continue
        name = workload(job)
        before = store.seen(f"image@{name}")
        if before == job.image:
            continue
        store.see(f"image@{name}", job.image, at)
        if before is not None:
            change, added = record_change(store, audit, key=f"image:{name}:{job.image}", kind="image", target=name,
                                          description=f"image {before} -> {job.image}", at=at, now=at,
                                          source="detected", by="steward", run_id=run_id,
                                          detail={"from": before, "to": job.image, "job": job.id})
            if added:
                out.append(change)
    digest = policy_hash(policy)
    before = store.seen("policy")
    if before != digest:
        store.see("policy", digest, at)
        if before is not None:
            change, added = record_change(store, audit, key=f"policy:{digest}", kind="policy", target="policy",
                                          description=f"steward policy edited (hash {before} -> {digest})", at=at,
                                          now=at, source="detected", by="steward", run_id=run_id,
                                          detail={"from": before, "to": digest})
            if added:
                out.append(change)
    return out


def collect_signals(store: ChangeStore, obs: Observation, failed: Iterable[JobInfo]) -> int:
    """Record this sweep's XIDs, failed jobs and queue waits, each once; how many were new."""
    new = 0
    for series in obs.gpus:
        if series.xid_last and series.xid_at is not None:
            key = f"xid:{series.node}:{series.gpu}:{series.xid_last}:{stamp(series.xid_at)}"
            new += store.add_signal(key, "xid", series.xid_at, f"{series.node} GPU {series.gpu} XID {series.xid_last}")
    for job in failed:
        new += store.add_signal(f"failed:{job.uid or job.id}", "job_failed", job.ended_at or obs.at, job.id)
    for job in obs.jobs:
        if job.started_at is not None and job.submitted_at is not None and job.gpus > 0:
            wait = max(0.0, (job.started_at - job.submitted_at).total_seconds())
            new += store.add_signal(f"wait:{job.uid or job.id}", "queue_wait", job.started_at, job.id, wait)
    return new


# -- impact -------------------------------------------------------------------------------------------------
class Measure(BaseModel):
    name: str  # job_failures | xid_errors | alert_incidents | queue_wait_min
    before: float
    after: float
    samples_before: int
    samples_after: int
    rose: bool


class ImpactReport(BaseModel):
    change: Change
    at: datetime
    span_h: float
    before_from: datetime
    after_until: datetime
    measures: list[Measure] = []
    flagged: bool = False
    too_early: bool = False
    runbook: str = RUNBOOK
    rule: str = (f"a rise is at least {MIN_EVENTS} events after and at least {RISE_FACTOR:g}x the same span "
                 f"before (queue wait: {MIN_EVENTS}+ jobs, mean {RISE_FACTOR:g}x and {MIN_WAIT_RISE_S / 60:g}+ "
                 "min longer)")


def _count_rose(before: int, after: int) -> bool:
    return after >= MIN_EVENTS and after >= RISE_FACTOR * before


def _incidents(audit: AuditLog | None, since: datetime, until: datetime) -> int:
    if audit is None:
        return 0
    first: dict[Any, datetime] = {}
    for e in audit.entries(kind="alert_incident", since=since, limit=10_000, newest_first=False):
        key = e.data.get("incident")
        if key is not None and key not in first:
            first[key] = e.at
    return sum(1 for at in first.values() if since <= at < until)


def span_limit(store: ChangeStore, change: Change, now: datetime) -> float:
    """Seconds compared on each side: up to a day, and no further than now, the next change, or the time the
    steward began watching (before it nothing was counted, which is not the same as nothing happening)."""
    limits = [SPAN_MAX_S, (now - change.at).total_seconds()]
    later = [c.at for c in store.changes(since=change.at, until=now, limit=50) if c.at > change.at]
    if later:
        limits.append((min(later) - change.at).total_seconds())
    since = store.observing_since()
    if since is None:
        return 0.0  # no sweep has watched this store: nothing was counted on either side
    limits.append((change.at - since).total_seconds())
    return max(0.0, min(limits))


def impact(store: ChangeStore, change: Change, now: datetime, audit: AuditLog | None = None) -> ImpactReport:
    """The change's aftermath against the same span before it (span_limit)."""
    span_s = span_limit(store, change, now)
    span = timedelta(seconds=span_s)
    start, end = change.at - span, change.at + span
    report = ImpactReport(change=change, at=now, span_h=round(span_s / 3600.0, 2), before_from=start,
                          after_until=end)
    if span_s < SPAN_MIN_S:
        report.too_early = True  # too young, or nothing to compare it with
        return report
    for kind, name in (("job_failed", "job_failures"), ("xid", "xid_errors")):
        before = len(store.signals(kind, start, change.at))
        after = len(store.signals(kind, change.at, end))
        report.measures.append(Measure(name=name, before=before, after=after, samples_before=before,
                                       samples_after=after, rose=_count_rose(before, after)))
    if audit is not None:
        before, after = _incidents(audit, start, change.at), _incidents(audit, change.at, end)
        report.measures.append(Measure(name="alert_incidents", before=before, after=after, samples_before=before,
                                       samples_after=after, rose=_count_rose(before, after)))
    waits_before = [v for _, _, v in store.signals("queue_wait", start, change.at)]
    waits_after = [v for _, _, v in store.signals("queue_wait", change.at, end)]
    if waits_before or waits_after:
        mean_b = sum(waits_before) / len(waits_before) if waits_before else 0.0
        mean_a = sum(waits_after) / len(waits_after) if waits_after else 0.0
        rose = (len(waits_after) >= MIN_EVENTS and mean_a >= RISE_FACTOR * mean_b
                and mean_a - mean_b >= MIN_WAIT_RISE_S)
        report.measures.append(Measure(name="queue_wait_min", before=round(mean_b / 60, 1),
                                       after=round(mean_a / 60, 1), samples_before=len(waits_before),
                                       samples_after=len(waits_after), rose=rose))
    report.flagged = any(m.rose for m in report.measures)
    return report


MEASURE_LABELS = {
    "job_failures": ("job failures", "作业失败"), "xid_errors": ("XID errors", "XID 错误"),
    "alert_incidents": ("alert incidents", "告警事件"), "queue_wait_min": ("mean queue wait (min)", "平均排队（分钟）"),
}


def render_impact(report: ImpactReport, language: str = "en") -> str:
    """The change-impact report for people, in English or Chinese."""
    zh = language == "zh"
    c = report.change
    target, description = one_line(c.target), one_line(c.description)  # the cluster's text: one line each
    head = (f"变更 #{c.id}（{c.kind}）{target}：{description}，{c.at:%Y-%m-%d %H:%M} UTC" if zh
            else f"Change #{c.id} ({c.kind}) {target}: {description}, {c.at:%Y-%m-%d %H:%M} UTC")
    if report.too_early:
        return head + ("\n可比较的时长不足 30 分钟（变更太新、紧接着另一变更，或早于开始监测），尚无影响报告" if zh
                       else "\nless than 30 minutes to compare on each side (too recent, another change soon "
                            "after, or before the steward began watching): no impact report yet")
    lines = [head, (f"对比变更后 {report.span_h:g} 小时与变更前同样时长：" if zh
                    else f"The {report.span_h:g} h after it against the same span before it:")]
    for m in report.measures:
        label = MEASURE_LABELS.get(m.name, (m.name, m.name))[1 if zh else 0]
        mark = ("  ← 上升" if zh else "  <- rise") if m.rose else ""
        lines.append(f"- {label}：{m.before:g} → {m.after:g}{mark}" if zh else f"- {label}: {m.before:g} -> {m.after:g}{mark}")
    if report.flagged:
        lines.append(f"结论：变更后出现上升，请按处置手册 [rb:{report.runbook}] 评估回滚" if zh
                     else f"Verdict: a rise after the change; consider rolling back, runbook [rb:{report.runbook}]")
    else:
        lines.append("结论：未见上升" if zh else "Verdict: no rise")
    lines.append(("规则：" if zh else "Rule: ") + (
        f"变更后至少 {MIN_EVENTS} 次且不少于变更前同时长的 {RISE_FACTOR:g} 倍即为上升" if zh else report.rule))
    return "\n".join(lines)


# -- the sweep's hook -----------------------------------------------------------------------------------------
def watch(store: ChangeStore, audit: AuditLog, obs: Observation, policy: Policy, run_id: str, *,
          failed: Iterable[JobInfo] = (), people: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """One sweep's change governance: record what people announced and what changed, record the signals, and
    flag each change of the last day whose aftermath shows a rise (audited `change_impact`, once per change)."""
    now = obs.at
    store.mark_observing(now)
    recorded = []
    for item in people:
        kind, target, at = str(item["kind"]), str(item["target"]), item["at"]
        change, added = record_change(store, audit, key=f"recorded:{kind}:{target}:{stamp(at)}", kind=kind,
                                      target=target, description=str(item.get("description") or ""), at=at, now=now,
                                      source="recorded", by=str(item.get("by") or "scripted"), run_id=run_id)
        if added:
            recorded.append(change)
    detected = detect(store, audit, obs, policy, run_id)
    signals = collect_signals(store, obs, failed)
    store.prune(now - timedelta(seconds=RETAIN_SIGNALS_S))
    flagged = []
    for change in store.changes(since=now - timedelta(seconds=SPAN_MAX_S + 3600), until=now):
        if change.flagged_at is not None:
            continue
        report = impact(store, change, now, audit)
        if report.flagged and store.flag(change.id, now, report.model_dump(mode="json", exclude={"change"})):
            audit.record("change_impact", at=now, run_id=run_id, target=change.target, action=change.kind,
                         status="flagged", reason=render_impact(report, "en"),
                         data={"change": change.id, "kind": change.kind, "runbook": RUNBOOK,
                               "measures": [m.model_dump() for m in report.measures], "span_h": report.span_h,
                               "reason_zh": render_impact(report, "zh")})
            flagged.append(change.id)
    return {"recorded": [c.id for c in recorded], "detected": [c.id for c in detected], "signals": signals,
            "flagged": flagged}
