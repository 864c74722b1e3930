"""Unknown is not idle: missing history, partial Prometheus/Thanos answers and unmapped Slurm series never
turn a job that may be periodic into an idle one.

1. The long-tail lookback (or the life of a younger job) must be covered by valid samples, or the gaps are
   read in the job's favour (agent/detectors/longtail.py, JobSeries.coverage).
2. `warnings` in a successful answer (Thanos partial response) mark the observation degraded: no idle or
   zombie finding, and the report says so.
3. On Slurm the hpc_job mapping is loaded before any series (the coarse history included) is mapped.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.config.policy import Policy
from agent.detectors.engine import run_detectors
from agent.detectors.idle import IdleGpuDetector
from agent.detectors.longtail import long_tail_reason
from agent.detectors.signals import group_signals
from agent.detectors.zombie import ZombieDetector
from agent.graph.deps import StewardDeps, sweep_grid
from agent.graph.report import render_report
from agent.planning.policy_model import PolicyModel
from agent.records.approvals import ApprovalStore
from agent.records.audit import AuditLog
from agent.wiring import NoPools
from core.cluster import JobInfo, LogLine, NodeInfo, StopResult
from sim.fake_prometheus import FakePrometheus
from tests.test_coarse_history import COARSE, hist
from tests.test_detectors import AT, POLICY, busy_then_quiet, gpu, io, job, job_gpus, observe, progress
from tests.test_slurm_adapter import FakeCli
from tools import promql
from tools.notify import RecordingNotifier
from tools.prometheus import PrometheusMetrics
from tools.slurm import SlurmScheduler

DAY = 24 * 3600.0
OLD = AT - timedelta(days=3)  # older than the 24h long-tail lookback


def reason(obs, job_id: str = "ml/train", gpus: int = 4) -> str | None:
    window = group_signals(obs).jobs[job_id].window(3600, gpus)
    return long_tail_reason(window, obs.logs.get(job_id), POLICY.detectors.longtail, quiet_pct=2.0)


# -- 1. missing history ----------------------------------------------------------------------------------------


def test_a_job_older_than_its_history_is_not_idle():
    # 2 hours of fine slices and nothing else, for a job that has run for 3 days (short retention): its
    # quiet 70 minutes may be one of the pauses of a periodic job whose bursts fell before the data.
    obs = observe([job(started_at=OLD)], job_gpus("ml/train", busy_then_quiet(10, 14)), [io("ml/train", 24)])
    assert IdleGpuDetector(POLICY).detect(obs) == []
    why = reason(obs)
    assert why is not None and "history covers only 2h (8%) of the 24h lookback" in why
    assert "cannot rule out a periodic job" in why
    # Its age unknown, the job is read as older than the lookback: missing data is never taken for youth.
    unknown = observe([job(started_at=None)], job_gpus("ml/train", busy_then_quiet(10, 14)), [io("ml/train", 24)])
    assert IdleGpuDetector(POLICY).detect(unknown) == []


def test_a_job_younger_than_the_lookback_is_judged_on_its_life():
    # The same 2 hours are the whole life of a job started 2 hours ago: not a gap, and it is idle.
    obs = observe([job(started_at=AT - timedelta(hours=2))], job_gpus("ml/train", busy_then_quiet(10, 14)),
                  [io("ml/train", 24)])
    [f] = IdleGpuDetector(POLICY).detect(obs)
    assert f.since == AT - timedelta(minutes=70)
    coverage = group_signals(obs).jobs["ml/train"].coverage(DAY)
    assert coverage.lifetime and coverage.span_s == 2 * 3600 and coverage.fraction == 1.0


def coarse_quiet_job(utils: list[float | None], started_at: datetime | None):
    """One GPU quiet for the last hour of fine slices, with a coarse history (30-minute slices) before."""
    obs = observe([job(gpus=1, started_at=started_at)], [gpu("ml/train", [0.0] * 12)], [io("ml/train", 12)],
                  history=[hist("ml/train", utils)], history_slice_s=COARSE)
    return obs, IdleGpuDetector(POLICY).detect(obs)


def test_retention_shorter_than_the_lookback_protects():
    # Prometheus keeps 6 hours: 12 coarse slices, busy until 70 minutes ago (one long burst, no pattern).
    utils = [80.0] * 9 + [0.0] * 3
    obs, found = coarse_quiet_job(utils, OLD)
    assert found == []
    why = reason(obs, gpus=1)
    assert why is not None and "history covers only 6h (25%) of the 24h lookback (retention or gaps)" in why
    # With the whole day on record the same job is idle: one burst, then a pause far longer than it allows.
    _, [f] = coarse_quiet_job([80.0] * 45 + [0.0] * 3, OLD)
    assert f.since == AT - timedelta(hours=1.5)


def test_gaps_inside_the_life_protect():
    # A job 10 hours old whose history lost 4 of them (exporter down): bursts may have hidden there.
    utils = [80.0] * 6 + [None] * 8 + [0.0] * 6
    obs, found = coarse_quiet_job(utils, AT - timedelta(hours=10))
    assert found == []
    why = reason(obs, gpus=1)
    assert why is not None and "of the job's 10h life (retention or gaps)" in why
    coverage = group_signals(obs).jobs["ml/train"].coverage(DAY)
    assert coverage.lifetime and math.isclose(coverage.fraction, 12 / 20)


def test_a_gap_that_no_burst_could_explain_does_not_protect():
    # Busy 30 minutes, a 90-minute gap, then quiet for 3 hours: even a burst at the very end of the gap,
    # after an 85-minute pause, would allow 1.5 x 85 < 180 quiet minutes. The gap cannot change the answer.
    utils = [80.0] + [None] * 3 + [0.0] * 6
    _, [f] = coarse_quiet_job(utils, AT - timedelta(hours=5))
    assert f.since == AT - timedelta(hours=3)
    # Quiet for 2 hours only, the same gap could have held the pattern that protects it: a burst at the gap's end
    # after a pause of up to 1h55m. Two hours of quiet are longer than that, so the owner may be told now (as with
    # a rhythm seen whole); the stop waits for 1.5 x that pause.
    obs, [held] = coarse_quiet_job([80.0] + [None] * 3 + [0.0] * 4, AT - timedelta(hours=4))
    assert held.stop_after is not None and held.stop_after > AT, held
    why = reason(obs, gpus=1) or ""
    assert "of the job's 4h life" in why and "the gaps could hide a pause up to" in why, why
    # Quiet for an hour: shorter than a pause the gaps could hide, so nothing is said yet.
    assert coarse_quiet_job([80.0] + [None] * 3 + [0.0] * 2, AT - timedelta(hours=3))[1] == []


def test_a_few_missing_samples_within_min_coverage_change_nothing():
    # One empty coarse slice in a whole day of history (2%), where a short burst could have hidden: within
    # idle.min_coverage, the day is read as it is (the idle window itself tolerates as much).
    utils = [None] + [80.0] * 44 + [0.0] * 3
    _, [f] = coarse_quiet_job(utils, OLD)
    assert f.since == AT - timedelta(hours=1.5)


def test_a_busy_job_needs_no_long_history_for_a_zombie_finding():
    # Periodicity protects pauses, not hangs: a pinned GPU with a silent log is judged on its window.
    logs = {"ml/train": progress("ml/train", AT - timedelta(minutes=45))}
    obs = observe([job(started_at=None)], job_gpus("ml/train", [100.0] * 24), [io("ml/train", 24)], logs)
    assert [f.kind for f in ZombieDetector(POLICY).detect(obs)] == ["zombie"]


# -- 2. partial answers ------------------------------------------------------------------------------------------

PARTIAL = "partial response: store 10.0.3.7:10901 (sidecar, cluster=b) did not answer: context deadline exceeded"


def test_degraded_observation_makes_no_idle_or_zombie_finding():
    idle = observe([job()], job_gpus("ml/train", busy_then_quiet(10, 14)), [io("ml/train", 24)])
    assert [f.kind for f in run_detectors(idle, POLICY)] == ["idle"]
    partial = idle.model_copy(update={"degraded": [f"gpu history: {PARTIAL}"]})
    assert run_detectors(partial, POLICY) == []
    assert f"metrics incomplete (gpu history: {PARTIAL})" in (reason(partial) or "")
    logs = {"ml/train": progress("ml/train", AT - timedelta(minutes=45))}
    hung = observe([job()], job_gpus("ml/train", [100.0] * 24), [io("ml/train", 24)], logs)
    assert [f.kind for f in run_detectors(hung, POLICY)] == ["zombie"]
    assert run_detectors(hung.model_copy(update={"degraded": [PARTIAL]}), POLICY) == []


def test_response_warnings_are_read_cheaply_and_robustly():
    from tools.prometheus import response_warnings

    assert response_warnings(b'{"status":"success","data":{"result":[]}}') == []
    assert response_warnings(b'{"status":"success","data":{},"warnings":["a","b"]}') == ["a", "b"]
    assert response_warnings(b'{"warnings": "one"}') == ["one"]
    assert response_warnings(b'{"metric": {"reason": "warnings"} not json') == []


class Day:
    """A fake Prometheus answering a sweep's queries from util(slice end, step) for one GPU series."""

    def __init__(self, labels: dict[str, str], util, grid) -> None:
        self.labels = labels
        self.util = util
        fine, coarse = grid.slice_s, grid.history_slice_s
        io_q = promql.job_io_queries("", promql.DEFAULT_CONTAINER_SELECTOR, promql.DEFAULT_NETWORK_SELECTOR, fine)
        reads = (promql.gpu_range_queries("", fine), promql.gpu_history_queries("", coarse),
                 promql.gpu_instant_queries("", grid.lookback_s))
        self.names = {q: n for queries in reads for n, q in queries.items()}
        self.io = set(io_q.values())

    def value(self, name: str, t: float, step: float) -> float | None:
        busy = self.util(t, step)
        return {"util_max": busy[0], "util_min": busy[1], "util_avg": busy[2], "util_count": step / 30.0,
                "xid_last": 0.0, "fb_used": 20_000.0, "temp_max": 50.0,
                "power_avg": 200.0, "last_seen": t}[name]

    def __call__(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        query = params["query"]
        if query in self.io:
            return []
        name = self.names[query]
        if name == "profiling":
            return []  # an exporter without DCGM profiling fields
        metric = {k: self.labels.get(k, "") for k in promql.GPU_KEYS if k in self.labels}
        if path.endswith("query_range"):
            start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
            points = [[start + i * step, str(self.value(name, start + i * step, step))]
                      for i in range(round((end - start) / step) + 1)]
            return [{"metric": metric, "values": points}]
        t = float(params["time"])
        return [{"metric": metric, "value": [t, str(self.value(name, t, 300.0))]}]


def bursts(last_end: datetime, every_s: float, burst_s: float, since: datetime):
    """util(slice end, step) -> (max, min, avg): bursts of burst_s every every_s, the newest ending at last_end."""
    def util(t: float, step: float) -> tuple[float, float, float]:
        lo, busy = t - step, 0.0
        end = last_end.timestamp()
        while end > since.timestamp() and end > lo:
            busy += max(0.0, min(end, t) - max(end - burst_s, lo))
            end -= every_s
        if busy <= 0:
            return 0.0, 0.0, 0.0
        return 80.0, 80.0 if busy >= step else 0.0, 80.0 * busy / step
    return util


class FixedClock:
    def now(self) -> datetime:
        return AT


class K8s:
    """A one-job Kubernetes stand-in: the job on n1 gpu 0, started 3 days ago."""

    def __init__(self) -> None:
        self.job = JobInfo(id="ml/train", scheduler="kubernetes", namespace="ml", name="train", user="alice",
                           gpus=1, node="n1", started_at=OLD)

    def list_jobs(self) -> list[JobInfo]:
        return [self.job]

    def get_job(self, job_id: str) -> JobInfo | None:
        return self.job if job_id == self.job.id else None

    def list_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(name="n1", pool="a100", gpus=8, jobs=[self.job.id])]

    def stop_job(self, job_id: str, **kw: Any) -> StopResult:
        raise AssertionError("no stop in these tests")

    def tail(self, job_id: str, since: datetime, until: datetime, limit: int = 200) -> list[LogLine]:
        return []


def deps_for(metrics: PrometheusMetrics, scheduler: Any) -> StewardDeps:
    audit = AuditLog(":memory:")
    clock = FixedClock()
    return StewardDeps(metrics=metrics, scheduler=scheduler, logs=scheduler, pools=NoPools(),
                       notifier=RecordingNotifier(clock), clock=clock, policy=POLICY, audit=audit,
                       approvals=ApprovalStore(":memory:", audit), planner=PolicyModel())


def test_thanos_partial_response_is_surfaced_and_makes_no_idle_finding():
    grid = sweep_grid(POLICY)
    # Busy all day until 3 hours ago: idle, on whole data.
    answer = Day({"Hostname": "n1", "gpu": "0", "namespace": "ml", "pod": "train"},
                 bursts(AT - timedelta(hours=3), 10 * DAY, 2 * DAY, OLD), grid)
    with FakePrometheus(answer) as fake:
        deps = deps_for(PrometheusMetrics(fake.url), K8s())
        whole = deps.observe()
    assert whole.degraded == [] and deps.metrics.warnings == []
    assert [f.kind for f in run_detectors(whole, POLICY)] == ["idle"]

    def thanos(path: str, params: dict[str, str]) -> list[str]:
        return [PARTIAL] if float(params.get("step", 0)) == grid.history_slice_s else []  # the store of old blocks

    with FakePrometheus(answer, warnings=thanos) as fake:
        metrics = PrometheusMetrics(fake.url)
        deps = deps_for(metrics, K8s())
        partial = deps.observe()
        assert metrics.last_read_warnings == []  # the last read (process I/O) came back whole
    assert partial.degraded == [f"gpu history: {PARTIAL}"] == metrics.warnings
    assert run_detectors(partial, POLICY) == []
    deps.remember("run-1", partial)
    state: Any = {"run_id": "run-1", "at": AT.isoformat(), "observed": {"jobs": 1}, "findings": []}
    assert f"degraded: gpu history: {PARTIAL}" in render_report(state, deps).splitlines()
    # The next sweep starts a new record: warnings never outlive the reads they came with.
    with FakePrometheus(answer) as fake:
        metrics.client = PrometheusMetrics(fake.url).client
        assert deps.observe().degraded == []


def test_warnings_of_every_read_are_kept_once_each():
    grid = sweep_grid(POLICY)
    answer = Day({"Hostname": "n1", "gpu": "0", "namespace": "ml", "pod": "train"},
                 bursts(AT - timedelta(hours=3), 10 * DAY, 2 * DAY, OLD), grid)
    with FakePrometheus(answer, warnings=lambda path, params: ["PromQL warning: encountered a mix"]) as fake:
        metrics = PrometheusMetrics(fake.url)
        metrics.gpu_series(AT, grid.lookback_s, grid.slice_s)
        assert metrics.last_read_warnings == ["gpu metrics: PromQL warning: encountered a mix"]
        metrics.job_io_series(AT, grid.lookback_s, grid.slice_s)
    assert metrics.warnings == ["gpu metrics: PromQL warning: encountered a mix",
                                "process I/O: PromQL warning: encountered a mix"]


# -- 3. Slurm: the hpc_job mapping before any series ------------------------------------------------------------

SQUEUE = {"jobs": [{"job_id": 11, "name": "train", "partition": "gpu", "user_name": "alice", "account": "ml",
                    "qos": "normal", "job_state": "RUNNING", "nodes": "n1", "node_count": 1,
                    "start_time": int(OLD.timestamp()), "tres_alloc_str": "cpu=8,gres/gpu=1"}]}


def slurm_cli() -> FakeCli:
    return FakeCli({("squeue", "--json"): json.dumps(SQUEUE),
                    ("scontrol", "show", "nodes"): "NodeName=n1 Gres=gpu:a100:8 Partitions=gpu\n"})


def test_steward_id_for_loads_the_mapping_when_no_listing_was_taken():
    scheduler = SlurmScheduler(slurm_cli())
    assert scheduler.steward_id_for("11") == "gpu/train"
    assert scheduler.steward_id_for("12") is None
    assert [c[:2] for c in scheduler.calls] == [("squeue", "--json")]  # one listing, not one per label


def test_slurm_history_is_mapped_before_it_is_read():
    # A periodic job: 20-minute bursts every 2 hours all day, quiet for the last 70 minutes. Its coarse
    # history (read first in a sweep) must map hpc_job=11 to gpu/train, or the pattern is lost.
    grid = sweep_grid(POLICY)
    answer = Day({"Hostname": "n1", "gpu": "0", "hpc_job": "11"},
                 bursts(AT - timedelta(minutes=70), 2 * 3600.0, 20 * 60.0, OLD), grid)
    scheduler = SlurmScheduler(slurm_cli())  # a fresh process: no squeue yet
    with FakePrometheus(answer) as fake:
        deps = deps_for(PrometheusMetrics(fake.url, job_id_for_hpc_job=scheduler.steward_id_for), scheduler)
        obs = deps.observe()
    assert {h.job for h in obs.history} == {"gpu/train"}
    assert run_detectors(obs, POLICY) == []
    why = long_tail_reason(group_signals(obs).jobs["gpu/train"].window(3600, 1), None, POLICY.detectors.longtail,
                           quiet_pct=2.0)
    assert why is not None and why.startswith("periodic GPU work")


def test_an_unmapped_hpc_job_is_never_evidence_for_a_job():
    # dcgm-exporter reports hpc_job=12, which squeue does not list (a stale label, another cluster's job):
    # quiet all day, it must not become the series of gpu/train (Slurm 11), nor make n1 look free.
    grid = sweep_grid(POLICY)
    answer = Day({"Hostname": "n1", "gpu": "0", "hpc_job": "12"}, lambda t, step: (0.0, 0.0, 0.0), grid)
    scheduler = SlurmScheduler(slurm_cli())
    with FakePrometheus(answer) as fake:
        deps = deps_for(PrometheusMetrics(fake.url, job_id_for_hpc_job=scheduler.steward_id_for), scheduler)
        obs = deps.observe()
    signals = group_signals(obs)
    assert "gpu/train" not in signals.jobs
    assert all(s.job == "12" for s in obs.gpus) and all(h.job == "12" for h in obs.history)
    assert run_detectors(obs, Policy()) == []


def test_a_job_younger_than_the_idle_window_is_not_idle_yet():
    """Idle from its first minute, but 55 minutes old: not "idle for 1h" (rounding to slices must not say so)."""
    from agent.config.policy import Policy
    from agent.detectors.idle import IdleGpuDetector
    from core.cluster import GpuSeries, JobInfo
    from core.observation import Observation

    at = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    slices = 13
    series = GpuSeries(job="gpu/bash", node="n0", gpu=0, slice_s=300, util_max=[0.0] * slices,
                       util_avg=[0.0] * slices, samples=[10] * slices, expected=10)

    def findings(age_min: int):
        job = JobInfo(id="gpu/bash", uid="slurm:2", scheduler="slurm", namespace="gpu", name="bash", user="c",
                      gpus=1, started_at=at - timedelta(minutes=age_min))
        obs = Observation(at=at, slice_s=300, lookback_s=slices * 300, jobs=[job], gpus=[series])
        return IdleGpuDetector(Policy()).detect(obs)

    assert findings(55) == []
    assert [f.kind for f in findings(65)] == ["idle"]


def test_a_coarse_slice_with_all_its_samples_is_whole_at_a_slow_scrape_interval():
    """A 150 s scrape puts 2 samples in a 5-minute slice and 6 in a 15-minute one. Proof against any sample times
    needed 7, so no coarse slice was ever whole and an idle stretch stopped at the fine read ('idle for 1h15m' on a
    notebook idle all weekend). Samples come at a fixed interval: an empty fine slice loses 2 of the 6."""
    from agent.detectors.history import _no_empty_fine_slice

    assert _no_empty_fine_slice(6, 6, 3) and not _no_empty_fine_slice(5, 6, 3)  # 150 s
    assert _no_empty_fine_slice(15, 15, 3) and _no_empty_fine_slice(13, 15, 3)  # 60 s: as before
    assert not _no_empty_fine_slice(3, 3, 3)  # 300 s: one sample a fine slice, nothing to prove it by


def test_a_sampler_denser_than_configured_does_not_pass_a_slice_with_a_hole_as_whole():
    """Configured 150 s, real 120 s: slices hold 7 or 8 samples, and one that lost a 5-minute fine slice (2-3 samples)
    still holds the 6 the setting expects. Against what the GPU's slices usually hold, it is not whole."""
    from agent.detectors.history import _no_empty_fine_slice, _typical

    typical = _typical([8, 7, 8, 7, 8, 6, 8])
    assert typical == 8 and not _no_empty_fine_slice(6, 6, 3, typical) and _no_empty_fine_slice(8, 6, 3, typical)
    assert _no_empty_fine_slice(6, 6, 3, _typical([6, 6, 6, 6]))  # configured right: as before
