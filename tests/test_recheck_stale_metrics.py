"""The re-read of one job right before an action judges the freshness of the GPU metrics it read, as a sweep does.

A sweep whose every GPU has no sample in its newest slice is degraded and judges nothing (deps.stale_metrics). The
re-read before a warning or a stop reads only the target (and, for a pod of a distributed job, the other pods of its
job: deps.observe_job); when no GPU of any of them on some node has a sample in the newest slice (that node's
exporter or its scrape is down; Prometheus still answers with the older samples), what the job does now is unknown,
and unknown is not idle: the action is refused by the guardrail (rule metrics_stale), audited with when the GPU
metrics last had a sample, and the next sweep judges the job again. The warning stands, as for any refusal.

Before, the re-check judged the fresh reading as if it were complete: an approved stop of a waiting rank whose rank 0
had gone back to work, on a node whose exporter had just died, was carried out (the working rank was only "not seen
working"); a lone job was refused, but as "no current idle finding", which says nothing of the metrics.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.config.policy import Policy
from agent.graph.deps import stale_job_metrics
from agent.graph.report import outcome_text
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.cluster import GpuSeries, JobInfo
from sim.scenario import parse_scenario
from tests.zh_text import leftovers

JOB = "ds/nb"
IDLE = {"gpu_util": 0, "gpu_mem_gb": 5, "cpu_pct": 0.5}
STOP_DUE = 130 * 60  # idle from 10 min, warned at 70 min (a full idle hour), its stop due a notice later
SLOW = 600  # the sweep's planning takes 10 minutes: the re-read before the stop is 10 minutes after the sweep's


def _notebook(gap: tuple[float, float] | None = None):
    """A notebook idle from 10 min; `gap` (start, length in seconds): its node's exporter sends nothing then."""
    phases: list[dict] = [{"duration": "10m", "gpu_util": 50, "gpu_mem_gb": 5, "cpu_pct": 100, "log": "silent"}]
    if gap is None:
        phases.append(IDLE)
    else:
        start, length = gap
        phases += [{**IDLE, "duration": f"{start - 600:g}s"},
                   {**IDLE, "duration": f"{length:g}s", "metrics": "missing"}, {**IDLE, "metrics": "ok"}]
    return parse_scenario({
        "version": 1, "name": "stale-recheck", "duration": "8h", "step": "60s",
        "pools": [{"name": "a100", "gpus_per_node": 8, "nodes": 1, "min_nodes": 1, "price_per_gpu_hour": 4.0}],
        "jobs": [{"id": JOB, "user": "sam", "gpus": 1, "labels": {"app": "jupyter"}, "phases": phases}]})


def _slow_planning_at(deps, cluster, offset: float, then=None) -> None:
    """The sweep at `offset` plans for SLOW seconds (a slow model): its actions re-read the job SLOW seconds after
    the sweep read the cluster. `then`: called once the clock has moved."""
    real = deps.planner.plan

    def plan(*args, **kwargs):
        if cluster.offset_s == offset:
            cluster.advance(SLOW)
            if then is not None:
                then()
        return real(*args, **kwargs)

    deps.planner.plan = plan


def _sweep_until_stopped(cluster, service, until_min: int = 480) -> None:
    minute = 5
    while minute <= until_min and not cluster.stops:
        cluster.advance_to(max(minute * 60, cluster.offset_s))
        service.sweep()
        minute += 5


def _executions(deps, action: str) -> list:
    return [e for e in deps.audit.entries(kind="execution", target=JOB, limit=500, newest_first=False)
            if e.action == action]


def test_a_due_stop_on_a_job_whose_exporter_stopped_is_refused_then_done_once_samples_return():
    # The exporter on the notebook's node stops 30 s after the sweep the stop is due at, for 15 minutes; the stop is
    # carried out 10 minutes after that sweep. Its re-read holds no sample in its newest slice: refused, audited.
    deps, cluster = simulated_deps(_notebook(gap=(STOP_DUE + 30, 900)), Policy(), PolicyModel())
    _slow_planning_at(deps, cluster, STOP_DUE)
    _sweep_until_stopped(cluster, SweepService(deps))
    stops = _executions(deps, "terminate")
    assert [e.status for e in stops] == ["blocked", "executed"], [(e.at, e.status, e.reason) for e in stops]
    refused, done = stops
    assert refused.at == cluster.scenario.start + timedelta(seconds=STOP_DUE + SLOW)
    # The reason names the GPU metrics' last sample (the end of the newest slice holding one) and the rule.
    assert refused.reason.startswith("re-checked before acting: GPU metrics stale: ds/nb on a100-0: no GPU sample "
                                     "since 11:10 UTC"), refused.reason
    assert "unknown is not idle" in refused.reason
    zh = outcome_text("terminate", "blocked", "", refused.reason, "zh")
    assert "自 11:10 UTC 起没有 GPU 样本" in zh and "未知不等于空闲" in zh and not leftovers(zh), zh
    # Once samples return (still idle), a later sweep stops it: on fresh samples only, never inside the gap.
    assert done.at >= cluster.scenario.start + timedelta(seconds=STOP_DUE + 30 + 900), done.at
    assert [s.job for s in cluster.stops] == [JOB]


class _Lagging:
    """A metrics source whose newest `behind_s` of the job's samples have not arrived yet (a scrape pipeline or a
    remote-write queue behind), while `behind_s` is set; they arrive once it is cleared."""

    def __init__(self, inner, job: str) -> None:
        self.inner, self.job, self.behind_s = inner, job, 0.0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def gpu_series(self, end, lookback_s, slice_s):
        series = self.inner.gpu_series(end, lookback_s, slice_s)
        k = round(self.behind_s / slice_s)
        if not k:
            return series
        out = []
        for s in series:
            if s.job == self.job:
                cut = {name: value[:-k] + [None] * k for name, value in s.model_dump().items()
                       if isinstance(value, list) and value and name != "samples"}
                s = s.model_copy(update={**cut, "samples": s.samples[:-k] + [0] * k})
            out.append(s)
        return out


def test_a_refusal_on_samples_late_keeps_the_warning_and_the_next_sweep_stops_on_it():
    # The same stop, with the job's newest 10 minutes of samples late at its re-read (they arrive by the next sweep):
    # refused, and the next sweep stops it on the warning already given, on fresh samples. No state is lost.
    deps, cluster = simulated_deps(_notebook(), Policy(), PolicyModel())
    lagging = deps.metrics = _Lagging(deps.metrics, JOB)

    def late():
        lagging.behind_s = SLOW

    _slow_planning_at(deps, cluster, STOP_DUE, then=late)
    service = SweepService(deps)
    minute = 5
    while minute <= 240 and not cluster.stops:
        cluster.advance_to(max(minute * 60, cluster.offset_s))
        if cluster.offset_s > STOP_DUE + SLOW:
            lagging.behind_s = 0.0  # the samples arrived
        service.sweep()
        minute += 5
    stops = _executions(deps, "terminate")
    assert [e.status for e in stops] == ["blocked", "executed"], [(e.at, e.status, e.reason) for e in stops]
    assert "GPU metrics stale: ds/nb on a100-0: no GPU sample since 11:10 UTC" in stops[0].reason, stops[0].reason
    assert stops[1].at == cluster.scenario.start + timedelta(seconds=STOP_DUE + SLOW + 300)  # the next sweep
    assert [e.status for e in _executions(deps, "notify")] == ["executed"]  # one warning: the one that stood


def test_a_fresh_reading_still_stops_as_before():
    # The same slow sweep with the exporter up: the re-read 10 minutes on is fresh, and the stop is carried out.
    deps, cluster = simulated_deps(_notebook(), Policy(), PolicyModel())
    _slow_planning_at(deps, cluster, STOP_DUE)
    _sweep_until_stopped(cluster, SweepService(deps), until_min=STOP_DUE // 60)
    stops = _executions(deps, "terminate")
    assert [(e.status, e.at) for e in stops] == [
        ("executed", cluster.scenario.start + timedelta(seconds=STOP_DUE + SLOW))], stops


LABELS = {"kueue.x-k8s.io/pod-group-name": "ddp", "app": "ddp"}
TRAIN = {"duration": "60m", "gpu_util": [88, 98], "gpu_mem_gb": 70, "cpu_pct": [400, 600], "net_rx_mbps": [50, 100],
         "log": "loss"}
GANG_IDLE = {"gpu_util": 0, "gpu_mem_gb": 70, "cpu_pct": [0.3, 1], "net_rx_mbps": 0, "log": "silent"}


def _gang(dark_from_min: int | None):
    """A 2-pod job idle from 60 min; rank 0 evaluates from 190 min, writing no log. `dark_from_min`: rank 0's node
    exporter (and its cAdvisor) send nothing from then on."""
    dark = {"metrics": "missing"} if dark_from_min is not None else {}
    idle_for = (dark_from_min if dark_from_min is not None else 190) - 60
    rank0 = [TRAIN, {**GANG_IDLE, "duration": f"{idle_for}m"}]
    if dark_from_min is not None:
        rank0.append({**GANG_IDLE, **dark, "duration": f"{190 - dark_from_min}m"})
    rank0.append({"gpu_util": [40, 70], "gpu_mem_gb": 70, "cpu_pct": [100, 150], "net_rx_mbps": 0, "log": "silent",
                  **dark})
    return parse_scenario({
        "version": 1, "name": "gang-dark-sibling", "duration": "6h", "step": "60s",
        "pools": [{"name": "h100", "gpus_per_node": 8, "nodes": 2, "min_nodes": 1, "price_per_gpu_hour": 6.5,
                   "billing": "reserved"}],
        "jobs": [{"id": "ml/ddp-0", "user": "mei", "gpus": 8, "node": "h100-0", "labels": LABELS, "phases": rank0},
                 {"id": "ml/ddp-1", "user": "mei", "gpus": 8, "node": "h100-1", "labels": LABELS,
                  "phases": [TRAIN, GANG_IDLE]}]})


def _approve_rank1_stop(dark_from_min: int | None, answer_at_min: int):
    """Both ranks idle; their stops wait for a person (levels.max_auto 1), asked by 185 min; the approver says yes
    to rank 1's at `answer_at_min`."""
    policy = Policy.model_validate({"levels": {"max_auto": 1, "require_approval": [2, 3, 4]}})
    deps, cluster = simulated_deps(_gang(dark_from_min), policy, PolicyModel())
    service = SweepService(deps)
    asked = {}
    for t in range(300, 185 * 60 + 1, 300):
        cluster.advance_to(t)
        service.sweep()
        asked.update({a.target: a for a in deps.approvals.pending() if a.action == "terminate"})
    assert "ml/ddp-1" in asked, sorted(asked)
    cluster.advance_to(answer_at_min * 60)
    result = service.answer(asked["ml/ddp-1"].id, "approve", by="lead", reason="whole job idle since 60 min")
    return deps, cluster, [(o["action"], o["target"], o["status"], o["reason"])
                           for o in result.state.get("outcomes", [])]


def test_an_approved_stop_of_a_rank_whose_sibling_went_dark_is_refused():
    # Rank 0's node exporter dies at 186 min; at 190 min rank 0 goes back to work (an evaluation, no log lines). The
    # approver answers at 200 min: rank 1 reads idle and fresh, rank 0 has no sample in the newest slice. Its work is
    # unknown, not absent: the stop of rank 1 (which ends the whole job) is refused, naming rank 0's metrics.
    deps, cluster, outcomes = _approve_rank1_stop(dark_from_min=186, answer_at_min=200)
    assert not [s for s in cluster.stops if s.job.startswith("ml/ddp-")], outcomes
    [(action, target, status, reason)] = outcomes
    assert (action, target, status) == ("terminate", "ml/ddp-1", "blocked"), outcomes
    assert "GPU metrics stale: ml/ddp-0 on h100-0: no GPU sample since 12:05 UTC" in reason, reason
    assert "ml/ddp-1 on" not in reason  # rank 1's own GPUs are fresh
    [audited] = [e for e in deps.audit.entries(kind="execution", target="ml/ddp-1", limit=100)
                 if e.action == "terminate"]
    assert audited.status == "blocked" and audited.reason == reason


def test_an_approved_stop_of_a_gang_whose_metrics_are_fresh_is_still_carried_out():
    # The same job with rank 0's exporter up, answered at 188 min while both ranks still idle: stopped as before.
    deps, cluster, outcomes = _approve_rank1_stop(dark_from_min=None, answer_at_min=188)
    assert [(a, t, s) for a, t, s, _ in outcomes] == [("terminate", "ml/ddp-1", "executed")], outcomes


def _series(job: str, node: str, gpu: int, samples: list[int]) -> GpuSeries:
    return GpuSeries(job=job, node=node, gpu=gpu, slice_s=300.0, samples=samples, expected=5,
                     util_max=[0.0 if c else None for c in samples], util_avg=[0.0 if c else None for c in samples])


def test_stale_job_metrics_is_judged_per_job_and_node():
    at = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    job = JobInfo(id="gpu/train", scheduler="slurm", namespace="gpu", name="train", user="a", gpus=4)
    fresh, dark = [5, 5, 5], [5, 0, 0]
    # A Slurm job on two nodes, one node's exporter down: stale, naming that node and its last sample.
    why = stale_job_metrics([_series(job.id, "n1", 0, fresh), _series(job.id, "n1", 1, fresh),
                             _series(job.id, "n2", 0, dark), _series(job.id, "n2", 1, dark)], [job], at, 300.0)
    assert why is not None and "gpu/train on n2: no GPU sample since 11:50 UTC (2 GPU series)" in why, why
    assert "on n1" not in why
    # One GPU of a node without a sample while the node's exporter reports the others: the detectors' coverage rules
    # judge that (a lost GPU); not stale.
    assert stale_job_metrics([_series(job.id, "n1", 0, fresh), _series(job.id, "n1", 1, dark)], [job], at,
                             300.0) is None
    # No series at all: `not measured`, judged by nothing; not stale. Another job's series are not the target's.
    assert stale_job_metrics([], [job], at, 300.0) is None
    assert stale_job_metrics([_series("gpu/other", "n1", 0, dark)], [job], at, 300.0) is None
    assert "no GPU sample in the whole read" in (stale_job_metrics([_series(job.id, "n1", 0, [0, 0, 0])], [job], at,
                                                                   300.0) or "")
