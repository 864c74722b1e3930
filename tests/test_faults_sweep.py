"""Fault injection for the sweep over the real adapters: Prometheus and the Kubernetes API down, slow or partial,
failures on the mutating call, and the process killed between the guardrail's allow and the act, and between the
act and its audit.

The idle notebook of tests/fault_world.py is warned at minute 80 and, with nothing wrong, evicted at minute 110.
Each fault strikes at the decisive sweep. In every case: no stop on stale or missing data, no action twice, no
decision lost (the audit has the outcome, or the action is redone exactly once), and the degradation is said.
"""

from __future__ import annotations

import pytest

from agent.graph.report import render_report
from sim.fake_prometheus import FakePrometheus
from tests.conftest import free_port
from tests.fault_world import EVICT, NOTEBOOK, Killed, World, executions, kill_at
from tests.k8s_fake_api import Fault
from tools.prometheus import PrometheusMetrics

PARTIAL = "partial response: store 10.0.3.7:10901 did not answer (context deadline exceeded)"


@pytest.fixture
def world(fault_world):
    return fault_world


def warned(world: World, **options):
    """A service that has warned the notebook's owner at minute 80 (the stop is due at 110)."""
    service = world.service(**options)
    world.at(80)
    service.sweep()
    assert [(e.action, e.status) for e in executions(service.deps.audit)] == [("notify", "executed")]
    return service


def stopped_once(world: World, minute: float) -> None:
    """With the fault gone, the stop happens, exactly once: the assertions above were not vacuous."""
    service = world.service()
    world.at(minute)
    service.sweep()
    done = [e for e in executions(service.deps.audit, action="terminate") if e.status == "executed"]
    assert len(done) == 1, executions(service.deps.audit)
    assert world.pod()["metadata"].get("deletionTimestamp")


def no_stop(world: World, audit) -> None:
    assert not world.evictions() and not world.api.calls("DELETE")
    assert world.pod()["metadata"].get("deletionTimestamp") is None
    assert not [e for e in executions(audit, action="terminate") if e.status == "executed"]


# -- Prometheus ---------------------------------------------------------------------------------------------------

def dead_prometheus(world: World) -> PrometheusMetrics:
    return PrometheusMetrics(f"http://127.0.0.1:{free_port()}", retry=0)


def slow_prometheus(world: World) -> PrometheusMetrics:
    world.metrics_answer.delay_s = 5.0  # each answer comes after the client's timeout
    return world.metrics(timeout_s=0.3)


@pytest.mark.parametrize("fault,said", [(dead_prometheus, "Connection refused"), (slow_prometheus, "Read timed out")])
def test_prometheus_down_or_slow_at_the_deadline_stops_nothing_and_says_so(world, fault, said):
    warned(world)
    service = world.service(metrics=fault(world))
    world.at(110)
    result = service.sweep()
    no_stop(world, service.deps.audit)
    degraded = result.state["observed"]["degraded"]
    assert len(degraded) == 1 and degraded[0].startswith("cluster not read: metrics unavailable: PrometheusError")
    assert said in degraded[0]
    assert f"degraded: {degraded[0]}" in result.report and ": cluster not read" in result.report.splitlines()[0]
    assert "No finding: the data is incomplete" in result.report and result.state["findings"] == []
    [error] = service.deps.audit.entries(kind="error", run_id=result.run_id)
    assert error.status == "observe_failed" and error.reason == degraded[0]
    service.deps.language = "zh"
    zh = render_report(result.state, service.deps)
    assert "数据不完整：未能读取集群：指标不可用：PrometheusError" in zh and "无发现：数据不完整" in zh
    world.metrics_answer.wake()
    world.metrics_answer.delay_s = 0.0
    stopped_once(world, 112)


def test_a_thanos_partial_response_at_the_deadline_stops_nothing_and_says_so(world):
    warned(world)
    with FakePrometheus(world.metrics_answer, warnings=lambda path, params: [PARTIAL]) as thanos:
        service = world.service(metrics=PrometheusMetrics(thanos.url, sample_interval_s=30.0, retry=0))
        world.at(110)
        result = service.sweep()
    no_stop(world, service.deps.audit)
    assert result.state["observed"]["jobs"] == 2  # the cluster was read; the metrics are incomplete
    assert f"degraded: gpu metrics: {PARTIAL}" in result.report.splitlines()
    assert not [f for f in result.state["findings"] if f["target"] == NOTEBOOK]
    stopped_once(world, 112)


def test_a_job_whose_series_went_missing_is_not_stopped_and_the_report_names_it(world):
    warned(world)
    world.metrics_answer.hidden = {NOTEBOOK}  # its node's exporter stopped reporting the notebook's GPUs
    service = world.service()
    world.at(110)
    result = service.sweep()
    no_stop(world, service.deps.audit)
    assert (f"not measured: 1 running GPU job without GPU metrics ({NOTEBOOK}); nothing is judged about it"
            in result.report)
    service.deps.language = "zh"
    assert f"未测量：1 个运行中的 GPU 作业没有 GPU 指标（{NOTEBOOK}）" in render_report(result.state, service.deps)
    world.metrics_answer.hidden = set()
    stopped_once(world, 112)


def test_a_gap_in_a_jobs_samples_is_named_in_the_report_not_silent(world):
    """Its node's exporter restarted for 10 minutes: the 5-minute slices touching the gap leave 75 % of the
    notebook's window, so nothing is judged about it, and the report says so instead of leaving it out unsaid."""
    warned(world)
    world.metrics_answer.gaps = {NOTEBOOK: (98 * 60, 108 * 60)}
    service = world.service()
    world.at(110)
    result = service.sweep()
    no_stop(world, service.deps.audit)
    [line] = [x for x in result.report.splitlines() if x.startswith("not judged")]
    assert f"1 running GPU job with GPU samples for under 90% of the last 1h ({NOTEBOOK} 75%)" in line
    service.deps.language = "zh"
    assert "未判断：1 个运行中的 GPU 作业在最近 1 小时内的 GPU 样本覆盖率低于 90%" in render_report(result.state, service.deps)


def test_prometheus_failing_on_the_reread_before_acting_blocks_the_stop(world):
    warned(world)
    world.metrics_answer.failing = lambda query: 'pod="idle-notebook"' in query  # only the target's own re-read
    service = world.service()
    world.cluster.advance_to(110 * 60)
    service.deps.clock = Ticking(world.cluster)  # time passes between deciding and acting: a re-read is needed
    result = service.sweep()
    no_stop(world, service.deps.audit)
    [failed] = [o for o in result.state["outcomes"] if o["action"] == "terminate"]
    assert failed["status"] == "failed" and "could not re-read fresh state: metrics unavailable" in failed["reason"]
    assert "failed" in result.report and "could not re-read" in result.report
    world.metrics_answer.failing = lambda query: False
    stopped_once(world, 112)


class Ticking:
    """The cluster's clock, a second later on every read (a wall clock): acting never reuses the sweep's reading."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster

    def now(self):  # noqa: ANN201
        self.cluster.advance(1)
        return self.cluster.now()


# -- the Kubernetes API on reads ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fault,said", [
    (Fault("GET", "/api/v1/pods", 500, times=-1), "Internal Server Error"),
    (Fault("GET", "/api/v1/pods", 429, "TooManyRequests", "Too many requests, please try again later.", times=-1),
     "Too Many Requests"),
    (Fault("GET", "/api/v1/pods", 409, "Conflict", "the server reported a conflict", times=-1), "Conflict"),
    (Fault("GET", "/api/v1/pods", hang_s=4, times=-1), "timed out"),
])
def test_kubernetes_listing_fails_at_the_deadline_stops_nothing_and_says_so(world, fault, said):
    warned(world)
    world.api.inject(fault)
    service = world.service(request_timeout_s=0.3)
    world.at(110)
    result = service.sweep()
    no_stop(world, service.deps.audit)
    [reason] = result.state["observed"]["degraded"]
    assert reason.startswith("cluster not read: scheduler unavailable: ") and said in reason, reason
    assert f"degraded: {reason}" in result.report
    world.api.clear_faults()
    stopped_once(world, 112)


def test_kubernetes_failing_on_the_reread_before_acting_blocks_the_stop(world):
    warned(world)
    world.api.inject(Fault("GET", "/api/v1/namespaces/ml/pods/idle-notebook", 500, times=-1, exact=True))
    service = world.service()
    world.at(110)
    result = service.sweep()
    no_stop(world, service.deps.audit)
    # The guard decided on the sweep's own listing; acting could not re-read the pod, so it did not act blind.
    [failed] = executions(service.deps.audit, action="terminate")
    assert failed.status == "failed" and "could not re-read fresh state" in failed.reason
    assert "Internal Server Error" in failed.reason and "could not re-read" in result.report
    world.api.clear_faults()
    stopped_once(world, 112)


# -- the Kubernetes API on the mutating call ------------------------------------------------------------------------

def test_an_eviction_that_fails_is_audited_and_done_once_later(world):
    warned(world)
    world.api.inject(Fault("POST", EVICT, 500))
    service = world.service()
    world.at(110)
    result = service.sweep()
    [failed] = executions(service.deps.audit, action="terminate")
    assert failed.status == "failed" and "HTTP 500" in failed.data["detail"]
    assert world.pod()["metadata"].get("deletionTimestamp") is None  # the failed call had no effect
    assert "failed" in result.report and "HTTP 500" in result.report
    stopped_once(world, 112)
    assert len(world.evictions()) == 2  # the failed one and the one that took effect


def test_an_eviction_refused_with_a_conflict_is_audited_and_not_retried_blindly(world):
    warned(world)
    # 409 on an eviction carrying the pod's uid: the name belongs to another pod now (the precondition failed).
    world.api.inject(Fault("POST", EVICT, 409, "Conflict", "Precondition failed: UID in precondition: x"))
    service = world.service()
    world.at(110)
    result = service.sweep()
    assert world.pod()["metadata"].get("deletionTimestamp") is None  # nothing happened to the pod
    [refused] = executions(service.deps.audit, action="terminate")
    assert refused.status == "refused" and "not the same pod" in refused.data["detail"]
    assert "refused" in result.report and "Precondition failed" in result.report
    assert len(world.evictions()) == 1


def test_an_eviction_throttled_by_the_api_server_is_a_failure_not_a_budgets_no(world):
    warned(world)
    world.api.inject(Fault("POST", EVICT, 429, "TooManyRequests", "Too many requests, please try again later."))
    service = world.service()
    world.at(110)
    service.sweep()
    [throttled] = executions(service.deps.audit, action="terminate")
    # A PodDisruptionBudget's 429 is the owner's "no" (refused, backed off); the API server's is a failure to retry.
    assert throttled.status == "failed" and "throttled by the API server" in throttled.data["detail"]
    stopped_once(world, 112)


def test_an_eviction_whose_answer_is_lost_is_not_sent_again(world):
    warned(world)
    # The API server evicts, then the answer never comes: the client gives up after its timeout.
    world.api.inject(Fault("POST", EVICT, 504, "Timeout", "no answer", hang_s=3, applied=True))
    service = world.service(request_timeout_s=0.3)
    world.at(110)
    service.sweep()
    [lost] = executions(service.deps.audit, action="terminate")
    assert lost.status == "failed" and "timed out" in lost.reason.lower()
    assert world.pod()["metadata"].get("deletionTimestamp")  # it did take effect
    world.at(111)
    result = service.sweep()
    assert len(world.evictions()) == 1  # the terminating pod is not evicted again
    [again] = [d for d in result.state["decisions"] if d["proposal"]["action"] == "terminate"]
    assert again["decision"]["rule"] == "already_stopping" and "already stopping since" in again["decision"]["reason"]
    assert "already stopping" in result.report


# -- the process killed -----------------------------------------------------------------------------------------------

def test_killed_between_the_guardrails_allow_and_the_act(world):
    warned(world)
    service = world.service()
    kill_at(service.deps.scheduler, "get_job")  # acting starts with the fresh re-read of its target
    world.at(110)
    with pytest.raises(Killed):
        service.sweep()
    audit = service.deps.audit
    assert [d.status for d in audit.entries(kind="decision", target=NOTEBOOK) if d.action == "terminate"] == ["allow"]
    assert [i.action for i in audit.entries(kind="intent")] == ["notify"]  # it died before announcing the stop
    assert not world.evictions()
    stopped_once(world, 111)  # a fresh process on the same data dir does it, once
    assert len(world.evictions()) == 1


def test_killed_after_the_intent_before_the_call_is_redone_exactly_once(world):
    warned(world)
    service = world.service()
    kill_at(service.deps.scheduler, "stop_job")
    world.at(110)
    with pytest.raises(Killed):
        service.sweep()
    assert not world.evictions()
    fresh = world.service()
    world.at(111)
    result = fresh.sweep()
    outcomes = [(e.status, e.data.get("interrupted_run") is not None) for e in
                executions(fresh.deps.audit, action="terminate")]
    assert outcomes == [("skipped", True), ("executed", False)]  # settled as not done, then done once
    assert len(world.evictions()) == 1
    assert "Settled after an interruption" in result.report and "did not take effect" in result.report


def test_killed_between_the_act_and_its_audit(world):
    warned(world)
    service = world.service()
    kill_at(service.deps.audit, "record", after=False,
            when=lambda kind, **kw: kind == "execution" and kw.get("action") == "terminate")
    world.at(110)
    with pytest.raises(Killed):
        service.sweep()
    assert len(world.evictions()) == 1 and not executions(service.deps.audit, action="terminate")
    fresh = world.service()  # a new process, the same data dir: it finds the intent without an outcome
    world.at(111)
    result = fresh.sweep()
    assert len(world.evictions()) == 1  # not evicted again
    [settled] = executions(fresh.deps.audit, action="terminate")
    assert settled.status == "executed" and "the job is stopping: the terminate took effect" in settled.reason
    assert settled.data["target_uid"] == world.pod()["metadata"]["uid"] and settled.data["gpus"] == 2
    assert "Settled after an interruption" in result.report
    assert all(d["decision"]["verdict"] != "allow" for d in result.state["decisions"]
               if d["proposal"]["action"] == "terminate")
    fresh.deps.language = "zh"
    assert "中断后补记" in render_report(result.state, fresh.deps)


def killed_after_the_eviction(world) -> None:
    """A warned notebook evicted at 110, the process killed before the eviction's outcome is recorded."""
    warned(world)
    service = world.service()
    kill_at(service.deps.audit, "record", when=lambda kind, **kw: kind == "execution" and kw.get("action") == "terminate")
    world.at(110)
    with pytest.raises(Killed):
        service.sweep()


def test_killed_between_the_act_and_its_audit_and_the_pod_gone_at_restart_counts_as_a_stop(world):
    killed_after_the_eviction(world)
    uid = world.pod()["metadata"]["uid"]
    fresh = world.service()
    world.at(117)  # the restart comes after the grace period (5 minutes): the kubelet finished the deletion
    fresh.sweep()
    assert world.pod() is None and len(world.evictions()) == 1  # not evicted again
    [settled] = executions(fresh.deps.audit, action="terminate")
    # Not `skipped`: the stop took effect, and counts toward the rate limit, the circuit breaker and the savings.
    assert settled.status == "executed" and settled.data["interrupted_run"] is not None
    assert "the job is gone since the terminate was sent" in settled.reason and "counts as a stop" in settled.reason
    assert settled.data["target_uid"] == uid and settled.data["gpus"] == 2


def test_killed_between_the_act_and_its_audit_and_restarted_more_than_a_day_later_settles_the_stop(world):
    killed_after_the_eviction(world)
    fresh = world.service()
    world.at(110 + 25 * 60)  # down over a weekend, or crash-looping on a bad config: back 25 hours later
    fresh.sweep()
    # The intent is older than the guardrail's 24 hours, yet it is given its outcome: the stop took effect.
    [settled] = executions(fresh.deps.audit, action="terminate")
    assert settled.status == "executed" and settled.data["interrupted_run"] is not None, settled.reason
    assert len(world.evictions()) == 1


def test_killed_after_a_warning_before_its_audit_warns_again_once_and_never_stops_early(world):
    service = world.service()
    kill_at(service.deps.audit, "record", when=lambda kind, **kw: kind == "execution" and kw.get("action") == "notify")
    world.at(80)
    with pytest.raises(Killed):
        service.sweep()
    events = world.api.store.list("events", "ml")
    assert len(events) == 1  # delivered, but not recorded
    fresh = world.service()
    world.at(81)
    fresh.sweep()
    notes = executions(fresh.deps.audit, action="notify")
    # Unknown delivery never counts as a warning: settled as skipped, and the owner is warned again, once.
    assert [(n.status, n.data.get("interrupted_run") is not None) for n in notes] == [("skipped", True),
                                                                                       ("executed", False)]
    assert len(world.api.store.list("events", "ml")) == 2
    world.at(110)  # 30 minutes after the first warning, 29 after the recorded one: not yet
    fresh.sweep()
    assert not world.evictions()
    world.at(111)
    fresh.sweep()
    assert len(world.evictions()) == 1
