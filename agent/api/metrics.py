"""Prometheus metrics, collected at scrape time from the runtime and the audit log (so they survive restarts)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.api.health import REASONS, health
from agent.records.savings import compute_savings

if TYPE_CHECKING:
    from agent.api.runtime import StewardRuntime

KNOWN_KINDS = ("idle", "zombie", "overprovisioned", "node_health", "oversized")


class StewardCollector:
    def __init__(self, runtime: StewardRuntime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        rt, deps = self.runtime, self.runtime.deps
        sweeps = CounterMetricFamily("steward_sweeps", "Sweeps run by this process.")
        sweeps.add_metric([], rt.sweeps_total)
        yield sweeps

        findings = GaugeMetricFamily("steward_findings", "Findings in the latest sweep, by kind.", labels=["kind"])
        counts: Counter[str] = Counter(f.kind for f in rt.findings())
        for kind in sorted(set(KNOWN_KINDS) | set(counts)):
            findings.add_metric([kind], counts.get(kind, 0))
        yield findings

        actions = CounterMetricFamily("steward_actions", "Actions carried out or attempted, from the audit log.",
                                      labels=["action", "level", "status"])
        # The audit figures are read once per audit state and cluster minute (agent/api/snapshot.py), not per scrape.
        figures = json.loads(rt.snapshots.body("metrics-audit", (int(deps.clock.now().timestamp() // 60),),
                                               lambda: _audit_figures(rt)))
        for action, level, status, n in figures["actions"]:
            actions.add_metric([action, level, status], n)
        yield actions

        reclaimed = CounterMetricFamily("steward_reclaimed_gpu_hours", "GPU-hours freed by executed actions.")
        reclaimed.add_metric([], figures["reclaimed_gpu_hours"])
        yield reclaimed

        pending = GaugeMetricFamily("steward_approvals_pending", "Approval requests waiting for a human.")
        pending.add_metric([], len(deps.approvals.pending()))
        yield pending

        tokens = CounterMetricFamily("steward_llm_tokens", "Chat model tokens used by the chat endpoint.")
        tokens.add_metric([], rt.llm_tokens_total)
        yield tokens

        degraded = GaugeMetricFamily("steward_degraded", "1 while the steward is degraded for this reason "
                                     "(details: /healthz).", labels=["reason"])
        now = {p.reason for p in health(rt)}
        for reason in sorted(set(REASONS) | now):
            degraded.add_metric([reason], 1 if reason in now else 0)
        yield degraded

        head = deps.audit.head()
        head_seq = GaugeMetricFamily("steward_audit_head_seq", "Sequence number of the newest audit entry; it never "
                                     "goes down (a drop means entries were deleted).")
        head_seq.add_metric([], head.seq if head else 0)
        yield head_seq


def _audit_figures(rt: StewardRuntime) -> bytes:
    """Executed and attempted actions by (action, level, status), and GPU-hours reclaimed: the scrape's audit reads."""
    deps = rt.deps
    seen = Counter((e.action or "", str(e.level if e.level is not None else ""), e.status or "")
                   for e in deps.audit.entries(kind="execution", limit=1_000_000))
    savings = compute_savings(deps.audit, rt.findings(), deps.clock.now(), deps.currency, points=2)
    return json.dumps({"actions": [[*key, n] for key, n in sorted(seen.items())],
                       "reclaimed_gpu_hours": savings.reclaimed_gpu_hours}).encode()


def render_metrics(runtime: StewardRuntime) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StewardCollector(runtime))  # type: ignore[arg-type]
    return generate_latest(registry)
