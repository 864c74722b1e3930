"""A cluster for fault injection: the real adapters against loopback servers that can be made to fail.

A simulated cluster is mirrored into the loopback Kubernetes API (tests/k8s_fake_api.py) and served as
PromQL answers by the loopback Prometheus (sim/fake_prometheus.py), so a sweep runs through the real
`kubernetes` client, prometheus-api-client and the adapters in tools/. The audit log and approvals live in a
data dir on disk: `World.service()` builds a fresh SweepService on it, as a restarted process would.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent.config.policy import Policy, parse_policy
from agent.config.settings import Settings
from agent.graph.deps import StewardDeps
from agent.graph.service import SweepService
from agent.planning.policy_model import Planner, PolicyModel
from agent.records.approvals import ApprovalStore
from agent.records.audit import AuditEntry, AuditLog
from sim.cluster import SimCluster
from sim.fake_prometheus import FakePrometheus
from sim.scenario import parse_scenario
from tests.k8s_fake_api import FakeKubernetesApi
from tests.k8s_fake_cluster import kubeconfig, mirror_sim
from tools import promql
from tools.k8s_notify import kubernetes_notifier_from_settings
from tools.kubernetes import kubernetes_api_client
from tools.prometheus import PrometheusMetrics

# agg by (keys) (func(metric{matchers}[range])) [* or / a constant]
_QUERY = re.compile(r"^(?P<agg>\w+) by \((?P<keys>[^)]*)\) \((?P<func>\w+)\((?P<metric>\w+)"
                    r"(?:\{(?P<matchers>[^}]*)\})?(?:\[(?P<range>[^\]]+)\])?\)\)")
_MATCHER = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# One field of a tagged union (promql.tagged_union): label_replace(<query>, "steward_field", "<field>", "", "")
_TAGGED = re.compile(r'label_replace\((?P<query>.*?), "' + promql.FIELD_LABEL + r'", "(?P<field>\w+)", "", ""\)')
_NAMES = {
    ("max", "max_over_time", promql.UTIL): "util_max", ("min", "min_over_time", promql.UTIL): "util_min",
    ("max", "avg_over_time", promql.UTIL): "util_avg", ("max", "count_over_time", promql.UTIL): "util_count",
    ("max", "avg_over_time", promql.ENGINE): "engine_avg", ("max", "last_over_time", promql.XID): "xid_last",
    ("max", "last_over_time", promql.FB_USED): "fb_used", ("max", "max_over_time", promql.TEMP): "temp_max",
    ("max", "avg_over_time", promql.POWER): "power_avg", ("max", "timestamp", promql.UTIL): "last_seen",
    ("sum", "rate", promql.CPU): "cpu_pct", ("sum", "rate", promql.NET_RX): "net_rx_mbps",
    ("sum", "rate", promql.DISK_READ): "disk_read_mbps", ("sum", "rate", promql.DISK_WRITE): "disk_write_mbps",
}
_IO_NAMES = ("cpu_pct", "net_rx_mbps", *promql.DISK_FIELDS)


def _seconds(text: str) -> float:
    return float(text[:-2]) / 1000 if text.endswith("ms") else float(text.rstrip("s"))


class SimPrometheus:
    """Answers the PromQL a sweep sends (tools/promql.py) from a SimCluster, as Prometheus over dcgm-exporter
    and cAdvisor would: one series per GPU (or job) with the labels dcgm-exporter gives, a point per slice
    that has samples, label matchers honoured (the per-job re-read before acting). Queries for fields the
    simulator does not export are answered with no series, as Prometheus answers for an absent metric.

    Faults: `hidden` jobs' series are left out of every answer (an exporter that stopped reporting them);
    `gaps` drops a job's GPU samples between two cluster offsets, in seconds (an exporter restart on its node);
    a query for which `failing(query)` is true is answered with an error; every answer waits `delay_s` first
    (a slow Prometheus)."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.hidden: set[str] = set()
        self.gaps: dict[str, tuple[float, float]] = {}
        self.failing: Callable[[str], bool] = lambda query: False
        self.delay_s = 0.0
        self._lock = threading.Lock()  # the simulator is not thread-safe; Prometheus answers concurrently
        self._waking = threading.Event()
        self._read: dict[tuple, Any] = {}  # one simulator read per (what, end, lookback, slice) for a sweep's queries

    def _sim(self, what: str, at: datetime, lookback: float, step: float) -> Any:
        key = (what, at, lookback, step, self.cluster.offset_s)
        if key not in self._read:
            if len(self._read) > 64:
                self._read.clear()
            self._read[key] = getattr(self.cluster, what)(at, lookback, step)
        return self._read[key]

    def wake(self) -> None:
        """End every delay now (and from now on)."""
        self._waking.set()

    def __call__(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        if self.delay_s:
            self._waking.wait(self.delay_s)
        if self.failing(params["query"]):
            raise RuntimeError("query processing would load too many samples into memory")
        tagged = [(t["field"], t["query"]) for t in _TAGGED.finditer(params["query"])]
        if tagged and all(field in promql.DISK_FIELDS for field, _ in tagged):  # disk read and write, one request
            return [{**s, "metric": {**s["metric"], promql.FIELD_LABEL: field}}
                    for field, query in tagged for s in self._answer(path, {**params, "query": query})]
        return self._answer(path, params)

    def _answer(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        m = _QUERY.match(params["query"])
        name = _NAMES.get((m["agg"], m["func"], m["metric"])) if m else None
        if m is None or name is None:
            return []  # a field this exporter does not have (e.g. DCGM profiling): no series, as Prometheus answers
        wanted = dict(_MATCHER.findall(m["matchers"] or ""))
        with self._lock:
            if path.endswith("query_range"):
                start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
                n = round((end - start) / step) + 1
                return self._range(name, wanted, start, end, step, n)
            return self._instant(name, wanted, float(params["time"]), _seconds(m["range"] or "300s"))

    def _keep(self, job: str | None, wanted: dict[str, str]) -> bool:
        if job in self.hidden:
            return False
        ns, _, pod = (job or "").partition("/")
        labels = {"namespace": ns, "pod": pod}
        return all(labels.get(k, "") == v for k, v in wanted.items() if k in ("namespace", "pod", "hpc_job"))

    @staticmethod
    def _gpu_labels(s: Any) -> dict[str, str]:
        labels = {"Hostname": s.node, "gpu": str(s.gpu), "UUID": s.uuid or f"GPU-{s.node}-{s.gpu}",
                  "modelName": s.model or "A100"}
        if s.job:
            labels["namespace"], _, labels["pod"] = s.job.partition("/")
        return labels

    def _range(self, name: str, wanted: dict[str, str], start: float, end: float, step: float,
               n: int) -> list[dict[str, Any]]:
        at = datetime.fromtimestamp(end, UTC)
        out = []
        if name in _IO_NAMES:
            for io in self._sim("job_io_series", at, n * step, step):
                if self._keep(io.job, wanted):
                    ns, _, pod = io.job.partition("/")
                    out.append(self._points({"namespace": ns, "pod": pod}, getattr(io, name), start, step))
            return [s for s in out if s["values"]]
        history = {(h.node, h.gpu): h for h in self._sim("gpu_history", at, n * step, step)}
        for s in self._sim("gpu_series", at, n * step, step):
            if not self._keep(s.job, wanted):
                continue
            counts = [c or None for c in s.samples]
            lows = history[(s.node, s.gpu)].util_min if (s.node, s.gpu) in history else []
            values = {
                "util_max": s.util_max, "util_avg": s.util_avg, "util_count": counts,
                "util_min": [lo if c else None for lo, c in zip(lows or s.util_avg, counts, strict=False)],
                "engine_avg": s.engine_active_avg,
                "xid_last": [float(s.xid_last) if s.xid_at and start + i * step >= s.xid_at.timestamp() else 0.0
                             for i in range(n)],
            }[name]
            if s.job in self.gaps:
                lo, hi = (self.cluster.scenario.start + timedelta(seconds=t) for t in self.gaps[s.job])
                values = [None if lo.timestamp() < start + i * step <= hi.timestamp() + step else v
                          for i, v in enumerate(values)]
            out.append(self._points(self._gpu_labels(s), values, start, step))
        return [s for s in out if s["values"]]

    def _instant(self, name: str, wanted: dict[str, str], t: float, lookback: float) -> list[dict[str, Any]]:
        at = datetime.fromtimestamp(t, UTC)
        out = []
        for s in self._sim("gpu_series", at, lookback, lookback):
            if not self._keep(s.job, wanted) or not any(s.samples):
                continue
            value = {"fb_used": s.mem_used_mb, "temp_max": s.temp_c_max, "power_avg": s.power_w_avg,
                     "last_seen": t}[name]
            if value is not None:
                out.append({"metric": self._gpu_labels(s), "value": [t, str(value)]})
        return out

    @staticmethod
    def _points(labels: dict[str, str], values: list[Any], start: float, step: float) -> dict[str, Any]:
        return {"metric": labels,
                "values": [[start + i * step, str(v)] for i, v in enumerate(values) if v is not None]}


class Killed(BaseException):  # noqa: N818 - it stands for the process being killed, not an error
    """The process dies here: not an Exception, so nothing in the steward catches it."""


def kill_at(obj: Any, method: str, *, when: Callable[..., bool] = lambda *a, **k: True,
            after: bool = False) -> list[int]:
    """Make `obj.method` kill the process (raise Killed) on the first call where `when(*args, **kwargs)`: before
    the real call, or right `after` it returned. Returns a list that counts the kills."""
    real = getattr(obj, method)
    kills: list[int] = []

    def dying(*args: Any, **kwargs: Any) -> Any:
        if kills or not when(*args, **kwargs):
            return real(*args, **kwargs)
        kills.append(1)
        if after:
            real(*args, **kwargs)
        raise Killed(f"killed {'after' if after else 'before'} {method}")

    setattr(obj, method, dying)
    return kills


IDLE = [{"gpu_util": 0, "gpu_mem_gb": 10, "cpu_pct": 0.2}]
BUSY = [{"gpu_util": [85, 95], "gpu_mem_gb": 60, "cpu_pct": 90, "log": "loss", "log_every": "1m"}]
SCENARIO = {
    "version": 1, "name": "faults", "duration": "4h", "step": "30s",
    "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 1, "price_per_gpu_hour": 4.0}],
    "jobs": [
        {"id": "ml/idle-notebook", "user": "alice", "gpus": 2, "node": "a100-0", "phases": IDLE},
        {"id": "ml/training", "user": "dave", "gpus": 2, "node": "a100-0", "phases": BUSY},
    ],
}
NOTEBOOK = "ml/idle-notebook"
EVICT = "/api/v1/namespaces/ml/pods/idle-notebook/eviction"


class World:
    """One simulated cluster behind the loopback Kubernetes API and Prometheus, and a data dir on disk."""

    def __init__(self, tmp_path: Path, scenario: dict[str, Any] | None = None, policy: Policy | None = None) -> None:
        self.cluster = SimCluster(parse_scenario(scenario or SCENARIO))
        self.api = FakeKubernetesApi().start()
        mirror_sim(self.api, self.cluster)
        self.metrics_answer = SimPrometheus(self.cluster)
        self.prometheus = FakePrometheus(self.metrics_answer).__enter__()
        self.data_dir = tmp_path / "data"
        self.settings = Settings(kubeconfig=kubeconfig(self.api, tmp_path), data_dir=self.data_dir)
        # The faults' timeline (warned at minute 80, the stop due at 110) is written for a 30-minute notice.
        self.policy = policy or parse_policy({"warning": {"min_notice": "30m"}}, "fault world")
        self._stores: list[AuditLog | ApprovalStore] = []

    def close(self) -> None:
        for store in self._stores:
            store._conn.close()
        self.metrics_answer.wake()
        self.prometheus.__exit__(None, None, None)
        self.api.stop()

    def metrics(self, **options: Any) -> PrometheusMetrics:
        # One attempt per query: the client's own retries (with back-off) only make a failing test slower.
        return PrometheusMetrics(self.prometheus.url, sample_interval_s=30.0, retry=0, **options)

    def deps(self, *, planner: Planner | None = None, request_timeout_s: float = 2.0,
             metrics: Any = None) -> StewardDeps:
        """Deps as a freshly started process builds them: new clients, the stores reopened from the data dir."""
        from kubernetes import client

        from tools.kubernetes import KubernetesScheduler

        api_client = kubernetes_api_client(self.settings)
        k8s = KubernetesScheduler(client.CoreV1Api(api_client), clock=self.cluster,
                                  request_timeout_s=request_timeout_s)
        notifier = kubernetes_notifier_from_settings(self.settings, self.policy.warning.min_notice,
                                                     clock=self.cluster, api_client=api_client)
        audit = AuditLog(self.data_dir / "audit.sqlite")
        approvals = ApprovalStore(self.data_dir / "approvals.sqlite", audit)
        self._stores += [audit, approvals]
        return StewardDeps(metrics=metrics or self.metrics(), scheduler=k8s, logs=k8s, pools=self.cluster,
                           notifier=notifier, clock=self.cluster, policy=self.policy, audit=audit,
                           approvals=approvals, planner=planner or PolicyModel())

    def service(self, **options: Any) -> SweepService:
        return SweepService(self.deps(**options))

    def at(self, minute: float) -> None:
        self.cluster.advance_to(minute * 60)

    def evictions(self, path: str = EVICT) -> list[tuple[str, str, dict]]:
        return self.api.calls("POST", path)

    def pod(self, name: str = "idle-notebook", ns: str = "ml") -> dict | None:
        return self.api.store.objects["pods"].get((ns, name))


def executions(audit: AuditLog, target: str = NOTEBOOK, action: str | None = None) -> list[AuditEntry]:
    """The audited outcomes for a target, oldest first."""
    found = audit.entries(kind="execution", target=target, limit=1000, newest_first=False)
    return [e for e in found if action is None or e.action == action]
