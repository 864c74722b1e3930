"""A stop of one pod of a distributed job ends the whole job, so the pod is stopped only on the whole job's word.

The re-check right before a stop judges the pod as a sweep would: with the other pods of its job
(agent/graph/deps.py observe_job), and with the sweep's knowledge of which CPU/IO fields the source reads. An
approved stop of a waiting rank, asked for while the whole job was idle, is refused once another rank works again
(its stop would kill the working job); when the other pods cannot be listed, nothing is stopped. And a keep on one
pod keeps every pod of the job (the guardrail's protected rule, the policy model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.chatops.commands import grant_keep, parse_keep
from agent.config.policy import Policy
from agent.detectors.engine import run_detectors
from agent.graph.deps import JobMetrics
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from sim.scenario import load_scenario, parse_scenario
from tests.test_detectors import POLICY, job, job_gpus, observe

ROOT = Path(__file__).resolve().parent.parent

LABELS = {"kueue.x-k8s.io/pod-group-name": "ddp", "app": "ddp"}
TRAIN = {"duration": "60m", "gpu_util": [88, 98], "gpu_mem_gb": 70, "cpu_pct": [400, 600], "net_rx_mbps": [50, 100],
         "log": "loss"}
IDLE = {"gpu_util": 0, "gpu_mem_gb": 70, "cpu_pct": [0.3, 1], "net_rx_mbps": 0, "log": "silent"}
SCENARIO = {
    "version": 1, "name": "gang-approved-late", "duration": "6h", "step": "60s",
    "pools": [{"name": "h100", "gpus_per_node": 8, "nodes": 2, "min_nodes": 1, "price_per_gpu_hour": 6.5,
               "billing": "reserved"}],
    "jobs": [
        # rank 0: trains, the whole job stalls (both ranks idle) for 130 minutes, then rank 0 evaluates alone
        {"id": "ml/ddp-0", "user": "mei", "gpus": 8, "node": "h100-0", "labels": LABELS,
         "phases": [TRAIN, {**IDLE, "duration": "130m"},
                    {"gpu_util": [40, 70], "gpu_mem_gb": 70, "cpu_pct": [100, 150], "net_rx_mbps": 0, "log": "lines",
                     "log_every": "2m", "lines": ["eval: 5000/50000", "eval: 10000/50000", "eval: 15000/50000"]}]},
        # rank 1: waits in a gloo barrier for rank 0 throughout (GPU and CPU at 0)
        {"id": "ml/ddp-1", "user": "mei", "gpus": 8, "node": "h100-1", "labels": LABELS,
         "phases": [TRAIN, IDLE]},
    ],
}


def _asked_until_180_min():
    """Both ranks idle from 60 min; their stops wait for a person (levels.max_auto 1): the requests by 185 min."""
    policy = Policy.model_validate({"levels": {"max_auto": 1, "require_approval": [2, 3, 4]}})
    deps, cluster = simulated_deps(parse_scenario(SCENARIO), policy, PolicyModel())
    service = SweepService(deps)
    t = 0
    asked = {}
    while t < 185 * 60:
        t += 300
        cluster.advance_to(t)
        service.sweep()
        asked.update({a.target: a for a in deps.approvals.pending() if a.action == "terminate"})
    assert "ml/ddp-1" in asked, f"no stop of the waiting rank was asked for: {sorted(asked)}"
    return deps, cluster, service, asked


def test_an_approved_stop_of_a_waiting_rank_is_refused_once_its_gang_works_again():
    deps, cluster, service, asked = _asked_until_180_min()
    # Rank 0 works again from 190 min; at 230 min the sweep spares rank 1 (it waits for rank 0) ...
    cluster.advance_to(230 * 60)
    swept = service.sweep()
    rank1 = [f for f in swept.state["findings"] if f["target"] == "ml/ddp-1" and f["kind"] == "idle"]
    assert rank1 == [], rank1
    # ... and the approver, reading the request made at 180 min, says yes: the re-check sees rank 0 at work.
    result = service.answer(asked["ml/ddp-1"].id, "approve", by="lead", reason="whole job idle since 60 min")
    outcomes = [(o["action"], o["target"], o["status"], o["reason"]) for o in result.state.get("outcomes", [])]
    assert not [s for s in cluster.stops if s.job == "ml/ddp-1"], outcomes
    assert [(a, t, s) for a, t, s, _ in outcomes] == [("terminate", "ml/ddp-1", "blocked")], outcomes


def test_an_approved_stop_of_a_gang_pod_is_not_done_when_its_siblings_cannot_be_listed(monkeypatch):
    deps, cluster, service, asked = _asked_until_180_min()
    cluster.advance_to(188 * 60)  # the whole job still idle: the stop would stand, if the siblings could be read

    def down():
        raise ConnectionError("the API server did not answer")

    # The cluster read the approval's run starts from is taken; only the re-check's list of the siblings fails.
    deps.remember(asked["ml/ddp-1"].id, deps.observe())
    monkeypatch.setattr(deps.scheduler, "list_jobs", down)
    result = service.answer(asked["ml/ddp-1"].id, "approve", by="lead", reason="whole job idle")
    outcomes = [(o["action"], o["target"], o["status"], o["reason"]) for o in result.state.get("outcomes", [])]
    assert not [s for s in cluster.stops if s.job == "ml/ddp-1"], outcomes
    assert outcomes and all(s == "failed" and "distributed job" in r for _, _, s, r in outcomes), outcomes


@pytest.mark.parametrize("sweep_read_cpu", [True, False])
def test_a_recheck_knows_which_cpu_io_fields_the_sweep_saw_read(sweep_read_cpu):
    # A job whose every cAdvisor series vanished is unknown, not idle, where the source reads them for other jobs.
    # The re-check reads that job alone: the sweep's fields (Observation.io_fields) say what its own series cannot.
    quiet = job("ml/quiet", gpus=1, node="n1")
    alone = observe([quiet], job_gpus("ml/quiet", [0.0] * 24, node="n1"), [], {})
    if sweep_read_cpu:
        alone.io_fields = ["cpu_pct", "net_rx_mbps"]
    idle = [f for f in run_detectors(alone, POLICY) if f.target == "ml/quiet" and f.kind == "idle"]
    assert (idle == []) is sweep_read_cpu, idle


def test_keeping_one_pod_of_a_distributed_job_keeps_its_siblings_from_being_stopped():
    # The eval scenario rendezvous-timeout-holding-gpus: a 2-pod PyTorchJob stuck in rendezvous. Its owner keeps the
    # master to debug and is told the steward will not stop it: the worker is not stopped either (that ends the job).
    scenario = load_scenario(ROOT / "evals" / "scenarios" / "rendezvous-timeout-holding-gpus.yaml")
    deps, cluster = simulated_deps(scenario, Policy(), PolicyModel())
    service = SweepService(deps)
    cluster.advance_to(10 * 60)
    service.sweep()
    reply = grant_keep(deps, parse_keep("keep 4h llm-sft/qwen-sft-master-0 debugging the rendezvous"), user="he",
                       approver=False, by="wecom:he", run_id="chatops-wecom", lang="en")
    assert reply.startswith("OK") and "will not stop it" in reply, reply
    for minute in range(15, 240, 5):  # the keep lasts past the scenario's end
        cluster.advance_to(minute * 60)
        result = service.sweep()
    stops = [(e.at.strftime("%H:%M"), e.action, e.target, e.data.get("detail"))
             for e in deps.audit.entries(kind="execution", limit=500, newest_first=False)
             if e.action in ("terminate", "force_terminate") and e.status == "executed"
             and e.target and e.target.startswith("llm-sft/qwen-sft-")]
    assert stops == [], (f"the owner kept llm-sft/qwen-sft-master-0 (its PyTorchJob qwen-sft) until 05:10 UTC, and "
                         f"the steward stopped the job's other pod, which kills the job: {stops}")
    assert not [s for s in cluster.stops if s.job.startswith("llm-sft/qwen-sft-")]
    # The planner says why it leaves the worker alone, naming the kept pod.
    assert "llm-sft/qwen-sft-master-0, a pod of the same distributed job" in result.report or any(
        "llm-sft/qwen-sft-master-0, a pod of the same distributed job" in str(v) for v in result.state.values()), \
        result.report


def test_a_gang_pods_re_read_lists_its_siblings_and_reads_them_scoped():
    # A source that scopes its queries to a job (PromQL label matchers) is asked per pod of the job: the read stays
    # bounded by the job's size, and every pod the detectors judge together has its series.
    deps, cluster = simulated_deps(parse_scenario(SCENARIO), Policy(), PolicyModel())
    cluster.advance_to(120 * 60)
    inner, scoped = deps.metrics, []

    class Scoping:
        def __getattr__(self, name):
            return getattr(inner, name)

        def for_job(self, job):
            scoped.append(job.id)
            return JobMetrics(inner, frozenset({job.id}))

    deps.metrics = Scoping()
    lists = []
    real = deps.scheduler.list_jobs
    deps.scheduler.list_jobs = lambda: lists.append(1) or real()  # type: ignore[method-assign]
    rank1 = deps.scheduler.get_job("ml/ddp-1")
    obs = deps.observe_job(rank1)
    assert sorted(j.id for j in obs.jobs) == ["ml/ddp-0", "ml/ddp-1"] and sorted(scoped) == ["ml/ddp-0", "ml/ddp-1"]
    assert {s.job for s in obs.gpus} == {"ml/ddp-0", "ml/ddp-1"} and len(lists) == 1
