"""End to end: sweeps over the fake Kubernetes API warn, then evict; a PDB says no; a do-not-disrupt pod is left alone;
a Kubeflow notebook and a Job are stopped through their owners."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.graph.deps import StewardDeps
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.records.approvals import ApprovalStore
from agent.records.audit import AuditLog
from sim.cluster import SimCluster
from sim.scenario import parse_scenario
from tests.k8s_fake_api import FakeKubernetesApi, Fault
from tests.k8s_fake_cluster import kubeconfig, mirror_sim, pdb, run_job_controller, run_notebook_controller
from tools.k8s_notify import STOP_AFTER, kubernetes_notifier_from_settings
from tools.kubernetes import kubernetes_scheduler_from_settings

IDLE = [{"gpu_util": 0, "gpu_mem_gb": 10, "cpu_pct": 0.2}]
SCENARIO = {
    "version": 1, "name": "k8s-e2e", "duration": "3h", "step": "30s",
    "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 2, "price_per_gpu_hour": 4.0}],
    "jobs": [
        {"id": "ml/idle-notebook", "user": "alice", "gpus": 2, "node": "a100-0", "phases": IDLE},
        {"id": "ml/guarded-serve", "user": "bob", "gpus": 2, "node": "a100-0", "phases": IDLE},
        {"id": "ml/pinned", "user": "carol", "gpus": 2, "node": "a100-1", "phases": IDLE,
         "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
        {"id": "ml/training", "user": "dave", "gpus": 2, "node": "a100-1",
         "phases": [{"gpu_util": [85, 95], "gpu_mem_gb": 60, "cpu_pct": 90, "log": "loss", "log_every": "1m"}]},
    ],
}


def _deps(api: FakeKubernetesApi, cluster: SimCluster, tmp_path) -> StewardDeps:
    """A steward on the loopback API server mirroring `cluster`, with the default policy and in-memory stores."""
    settings = Settings(kubeconfig=kubeconfig(api, tmp_path), data_dir=tmp_path)
    policy = Policy()
    k8s = kubernetes_scheduler_from_settings(settings, clock=cluster)
    audit = AuditLog(":memory:")
    return StewardDeps(
        metrics=cluster, scheduler=k8s, logs=k8s, pools=cluster,
        notifier=kubernetes_notifier_from_settings(settings, policy.warning.min_notice, clock=cluster),
        clock=cluster, policy=policy, audit=audit, approvals=ApprovalStore(":memory:", audit), planner=PolicyModel(),
    )


@pytest.fixture
def world(tmp_path):
    cluster = SimCluster(parse_scenario(SCENARIO))
    api = FakeKubernetesApi().start()
    mirror_sim(api, cluster)
    api.store.put("poddisruptionbudgets", pdb("ml", "serve-pdb", {"app": "guarded-serve"}, allowed=0))
    deps = _deps(api, cluster, tmp_path)
    yield cluster, api, deps, SweepService(deps)
    api.stop()


def _touched(api, pod: str) -> list[tuple[str, str]]:
    return [(m, p) for m, p, _ in api.requests if m != "GET" and f"/pods/{pod}" in p]


def test_sweeps_warn_then_evict_and_respect_pdb_and_do_not_disrupt(world):
    cluster, api, deps, service = world
    outcomes = []
    for minute in range(10, 141, 10):
        cluster.advance_to(minute * 60)
        result = service.sweep()
        outcomes += [(minute, o["action"], o["target"], o["status"], o.get("detail", ""))
                     for o in result.state.get("outcomes", [])]

    warned = [o for o in outcomes if o[1] == "notify" and o[2] == "ml/idle-notebook"]
    evicted = [o for o in outcomes if o[1] == "terminate" and o[2] == "ml/idle-notebook"]
    assert warned and warned[0][3] == "executed" and "kubernetes-event" in warned[0][4]
    assert evicted and evicted[0][3] == "executed" and evicted[0][0] - warned[0][0] >= 30
    assert api.calls("POST", "/api/v1/namespaces/ml/pods/idle-notebook/eviction")
    assert not api.calls("DELETE")  # level 3 needs a human: nothing was force-deleted

    events = api.store.list("events", "ml")
    assert {e["involvedObject"]["name"] for e in events} >= {"idle-notebook", "guarded-serve"}
    assert all(e["reason"] == "StewardWarning" for e in events)

    refused = [o for o in outcomes if o[1] == "terminate" and o[2] == "ml/guarded-serve"]
    # A PDB "no" is the owner's choice, not a fault: refused (not failed), tried once, then backed off.
    assert len(refused) == 1 and refused[0][3] == "refused" and "disruption budget" in refused[0][4]
    assert api.store.get("pods", "ml", "guarded-serve")["metadata"].get("deletionTimestamp") is None
    audited = deps.audit.entries(kind="execution", target="ml/guarded-serve", status="refused", limit=10)
    assert audited and "refused" in audited[0].data["detail"]
    assert not deps.audit.entries(kind="execution", status="failed", limit=10)  # the circuit breaker stays closed

    assert _touched(api, "pinned") == [] and not [o for o in outcomes if o[2] == "ml/pinned"]
    assert STOP_AFTER not in (api.store.get("pods", "ml", "pinned")["metadata"].get("annotations") or {})
    assert _touched(api, "training") == []


def test_a_sweep_costs_a_fixed_number_of_api_calls(world):
    cluster, api, deps, service = world
    cluster.advance_to(20 * 60)
    before = len(api.requests)
    deps.observe()
    reads = api.requests[before:]
    lists = [q["fieldSelector"][0] for m, p, q in reads if p == "/api/v1/pods"]
    # The GPU pods that hold or wait for GPUs, and the ended ones (the doomed-job history): two lists.
    assert lists == ["status.phase!=Succeeded,status.phase!=Failed",
                     "status.phase!=Running,status.phase!=Pending,status.phase!=Unknown"]
    assert [p for m, p, _ in reads if p == "/api/v1/nodes"] == ["/api/v1/nodes"]
    assert all(p.endswith("/log") for m, p, _ in reads if p not in ("/api/v1/pods", "/api/v1/nodes"))


def test_a_pod_crash_looping_in_place_gets_advice_and_is_never_stopped(world):
    """The kubelet restarts a failing container in place: the pod never ends, so only its restartCount and last
    termination show the loop. The sweep tells the owner (a Kubernetes event, level 1), once, and stops nothing."""
    cluster, api, deps, service = world
    cluster.advance_to(10 * 60)
    pod = api.store.get("pods", "ml", "training")
    ended = (cluster.now() - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    began = (cluster.now() - timedelta(minutes=4)).isoformat().replace("+00:00", "Z")
    pod["status"]["containerStatuses"] = [{
        "name": pod["spec"]["containers"][0]["name"], "restartCount": 7,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "startedAt": began, "finishedAt": ended}}}]
    api.store.put("pods", pod)
    outcomes = []
    for minute in (10, 20):
        cluster.advance_to(minute * 60)
        outcomes += [o for o in service.sweep().state.get("outcomes", []) if o["target"] == "ml/training"]
    assert [(o["action"], o["status"]) for o in outcomes] == [("notify", "executed")], outcomes
    assert "restarted 7 times" in outcomes[0]["reason"] and "Error (exit 1)" in outcomes[0]["reason"]
    assert not [p for m, p, _ in api.requests if m != "GET" and "/pods/training" in p and "eviction" in p]


OWNED = {
    "version": 1, "name": "k8s-owners", "duration": "3h", "step": "30s",
    "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 2, "price_per_gpu_hour": 4.0}],
    "jobs": [
        # A Kubeflow notebook holding a GPU all night; a fine-tuning Job; a Job the steward's role may not patch.
        {"id": "kf/lab-0", "user": "erin", "gpus": 1, "node": "a100-0", "phases": IDLE,
         "labels": {"notebook-name": "lab"}},
        {"id": "ml/sft-0", "user": "frank", "gpus": 2, "node": "a100-0", "phases": IDLE, "labels": {"job-name": "sft"}},
        {"id": "ml/nightly-0", "user": "gina", "gpus": 2, "node": "a100-1", "phases": IDLE,
         "labels": {"job-name": "nightly"}},
    ],
}


def test_sweeps_stop_a_notebook_and_a_job_through_their_owners_and_audit_each_outcome(tmp_path):
    """The mission's first case on a real cluster: evicting a notebook's pod frees nothing for long (its StatefulSet
    starts it again, a new uid whose idle clock starts afresh). The sweep warns the owners, saying how the stop is done
    and undone, then stops the Notebook and the Job themselves; a 403 is audited with the RBAC rule to add, and its
    pod is not evicted in vain. The controllers' part runs between sweeps, as on a cluster."""
    cluster = SimCluster(parse_scenario(OWNED))
    api = FakeKubernetesApi().start()
    try:
        mirror_sim(api, cluster)
        api.inject(Fault("PATCH", "/jobs/nightly", status=403, reason="Forbidden", times=-1,
                         message='jobs.batch "nightly" is forbidden: cannot patch resource "jobs"'))
        deps = _deps(api, cluster, tmp_path)
        audit = deps.audit
        service = SweepService(deps)
        for minute in range(10, 141, 10):
            cluster.advance_to(minute * 60)
            service.sweep()
            run_job_controller(api.store)
            run_notebook_controller(api.store)

        def executed(target: str, action: str) -> list:
            return [e for e in audit.entries(kind="execution", target=target, limit=100) if e.action == action]

        # Warned first, with how the stop is done and undone.
        messages = {e["involvedObject"]["name"]: e["message"] for e in api.store.list("events")}
        assert "kubectl annotate notebook lab -n kf kubeflow-resource-stopped-" in messages["lab-0"]
        assert """kubectl patch job sft -n ml --type=merge -p '{"spec":{"suspend":false}}'""" in messages["sft-0"]
        (lab,) = [e for e in executed("kf/lab-0", "terminate") if e.status == "executed"]
        assert "Notebook kf/lab" in lab.data["detail"] and "stopped as Kubeflow's idle culler does" in lab.data["detail"]
        (sft,) = [e for e in executed("ml/sft-0", "terminate") if e.status == "executed"]
        assert "Job ml/sft (uid uid-sft) suspended" in sft.data["detail"]
        assert "kubeflow-resource-stopped" in api.store.get("notebooks", "kf", "lab")["metadata"]["annotations"]
        assert api.store.get("statefulsets", "kf", "lab")["spec"]["replicas"] == 0
        assert api.store.get("jobs", "ml", "sft")["spec"]["suspend"] is True
        # Their pods went through their controllers, not an eviction (only dry runs asked the budgets); none came back.
        evicted = [p for _, p, q in api.calls("POST", "/eviction") if q.get("dryRun") != ["All"]]
        assert evicted == [] and not api.calls("DELETE")
        assert not api.store.list("pods", "kf") and ("ml", "sft-0") not in api.store.objects["pods"]

        failed = [e for e in executed("ml/nightly-0", "terminate") if e.status == "failed"]
        assert failed and 'add the rule {apiGroups: ["batch"], resources: ["jobs"], verbs: [get, patch]}' in \
            failed[0].data["detail"]
        assert api.store.get("jobs", "ml", "nightly")["spec"]["suspend"] is False
        assert "deletionTimestamp" not in api.store.get("pods", "ml", "nightly-0")["metadata"]
    finally:
        api.stop()
