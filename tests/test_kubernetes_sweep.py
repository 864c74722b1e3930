"""End to end: sweeps over the fake Kubernetes API warn, then evict; a PDB says no; a do-not-disrupt pod is left alone;
a Kubeflow notebook and a Job are stopped through their owners."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.graph.deps import StewardDeps
from agent.graph.report import outcome_text
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.records.approvals import ApprovalStore
from agent.records.audit import AuditLog
from sim.cluster import SimCluster
from sim.scenario import parse_scenario
from tests.k8s_fake_api import FakeKubernetesApi, Fault
from tests.k8s_fake_cluster import (
    kubeconfig,
    mirror_sim,
    pdb,
    run_job_controller,
    run_notebook_controller,
    run_training_operator,
)
from tests.zh_text import leftovers
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


GANG_LABELS = {"training.kubeflow.org/job-name": "ddp", "training.kubeflow.org/replica-type": "worker"}
TRAINING = [{"gpu_util": [85, 95], "gpu_mem_gb": 60, "cpu_pct": 90, "net_rx_mbps": [50, 100], "log": "loss",
             "log_every": "1m"}]


def _gang_world(tmp_path, *, worker_1=IDLE, audit_path=None):
    """A 2-pod PyTorchJob ml/ddp (its worker pods controlled by it, as the training operator makes them) on the
    loopback API, mirrored from the simulation; worker 0 idle from the start, worker 1 as given."""
    scenario = {"version": 1, "name": "k8s-gang", "duration": "3h", "step": "30s",
                "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 2, "price_per_gpu_hour": 4.0}],
                "jobs": [{"id": f"ml/ddp-worker-{i}", "user": "hana", "gpus": 2, "node": f"a100-{i}",
                          "phases": phases, "labels": {**GANG_LABELS, "training.kubeflow.org/replica-index": str(i)}}
                         for i, phases in enumerate((IDLE, worker_1))]}
    cluster = SimCluster(parse_scenario(scenario))
    api = FakeKubernetesApi().start()
    mirror_sim(api, cluster)
    job = api.store.put("pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp", "namespace": "ml"},
        "spec": {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}})
    for i in range(2):
        pod = api.store.get("pods", "ml", f"ddp-worker-{i}")
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "ddp",
                                               "uid": job["metadata"]["uid"], "controller": True}]
        api.store.put("pods", pod)
    deps = _deps(api, cluster, tmp_path)
    if audit_path is not None:
        deps.audit = AuditLog(audit_path)
        deps.approvals = ApprovalStore(":memory:", deps.audit)
    return cluster, api, deps, job["metadata"]["uid"]


def _sweep(cluster, api, deps, minutes) -> list[tuple[int, str, str, str, str]]:
    service, outcomes = SweepService(deps), []
    for minute in minutes:
        cluster.advance_to(minute * 60)
        outcomes += [(minute, o["action"], o["target"], o["status"], o.get("reason", "") + " | " + o.get("detail", ""))
                     for o in service.sweep().state.get("outcomes", [])]
        run_training_operator(api.store)
    return outcomes


def _stops(deps, target: str) -> list:
    return [e for e in deps.audit.entries(kind="execution", target=target, limit=100, newest_first=False)
            if e.action in ("terminate", "force_terminate")]


def _job_patches(api) -> list[str]:
    return [p for _, p, _ in api.calls("PATCH", "/pytorchjobs/")]


def _real_evictions(api) -> list[str]:
    return [p for _, p, q in api.calls("POST", "/eviction") if q.get("dryRun") != ["All"]]


def test_a_multi_pod_training_job_idle_as_a_whole_is_suspended_once_and_both_pods_recorded(tmp_path):
    """Both workers idle, both owners' warnings delivered, both deadlines passed: the first pod's stop suspends the
    PyTorchJob once (the training operator then deletes both pods, and creates none), the second pod's stop is
    recorded as done through that suspension, never patched again, never evicted."""
    cluster, api, deps, job_uid = _gang_world(tmp_path)
    try:
        outcomes = _sweep(cluster, api, deps, range(10, 141, 10))
        messages = {e["involvedObject"]["name"]: e["message"] for e in api.store.list("events")}
        for i in range(2):
            assert "once every one of the 2 pods of its PyTorchJob ml/ddp is due to be stopped" in \
                messages[f"ddp-worker-{i}"], messages
        assert _job_patches(api) == ["/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/ddp"], outcomes
        assert api.store.get("pytorchjobs", "ml", "ddp")["spec"]["runPolicy"]["suspend"] is True
        assert _real_evictions(api) == [] and not api.store.list("pods", "ml")
        (first,) = [e for e in _stops(deps, "ml/ddp-worker-0") if e.status == "executed"]
        assert f"PyTorchJob ml/ddp (uid {job_uid}) suspended" in first.data["detail"]
        assert "with it its other pod ml/ddp-worker-1" in first.data["detail"]
        assert first.data["covers"] == ["ml/ddp-worker-1"] and first.data["owner_uid"] == job_uid
        (second,) = [e for e in _stops(deps, "ml/ddp-worker-1") if e.status == "executed"]
        assert second.data["covered_by"] == "ml/ddp-worker-0" and second.data["owner_uid"] == job_uid
        assert second.data["gpus"] == 2 and second.at == first.at
        # The second pod's own stop, decided in the same sweep, lands in the audit as covered, not as a new stop.
        own = [e for e in _stops(deps, "ml/ddp-worker-1") if e.status != "executed"]
        assert [e.status for e in own] == ["skipped"] and own[0].reason.startswith(
            f"already stopped with ml/ddp-worker-0 at {first.at:%H:%M} by one suspension"), own
        zh = outcome_text("terminate", "skipped", "", own[0].reason, "zh")
        assert zh.startswith(f"已于 {first.at:%H:%M} 随 ml/ddp-worker-0 一并停止") and leftovers(zh) == [], zh
    finally:
        api.stop()


def test_a_restart_between_the_two_pods_stops_does_not_suspend_twice(tmp_path, monkeypatch):
    """The process stops right after the first pod's stop (its sibling's own stop not yet decided); a new process,
    on the same audit log, finds the second pod's stop done through the owner's suspension and patches nothing."""
    from agent.graph.nodes import act as act_node

    cluster, api, deps, job_uid = _gang_world(tmp_path, audit_path=tmp_path / "audit.db")
    real = act_node.execute_action

    class Killed(Exception):
        pass

    def dies_after_one_stop(deps_, ga, run_id, **kw):
        if ga.proposal.action == "terminate" and ga.proposal.target == "ml/ddp-worker-1":
            raise Killed
        return real(deps_, ga, run_id, **kw)

    try:
        monkeypatch.setattr(act_node, "execute_action", dies_after_one_stop)
        service, minute = SweepService(deps), 10
        while not _job_patches(api) and minute <= 140:
            cluster.advance_to(minute * 60)
            try:
                service.sweep()
            except Killed:
                break
            minute += 10
        assert _job_patches(api), "the first pod's stop never came"
        monkeypatch.setattr(act_node, "execute_action", real)
        # A new process: a new client, the same audit log. The operator has not deleted the pods yet.
        fresh = _deps(api, cluster, tmp_path)
        fresh.audit = AuditLog(tmp_path / "audit.db")
        fresh.approvals = ApprovalStore(":memory:", fresh.audit)
        outcomes = _sweep(cluster, api, fresh, range(minute, minute + 31, 10))
        assert len(_job_patches(api)) == 1, outcomes
        assert _real_evictions(api) == [], outcomes
        executed = [e for e in _stops(fresh, "ml/ddp-worker-1") if e.status == "executed"]
        assert len(executed) == 1 and executed[0].data["covered_by"] == "ml/ddp-worker-0", executed
    finally:
        api.stop()


@pytest.mark.parametrize("case", ["not warned", "working", "kept"])
def test_a_multi_pod_job_with_a_sibling_not_due_is_never_suspended(tmp_path, case):
    """A sibling whose warning never reached its owner: the idle pod's stop is its own (evicted, as before, and said
    why), the job is not suspended. A working sibling makes the job a working one, a kept sibling keeps the job:
    nothing is stopped at all."""
    cluster, api, deps, _ = _gang_world(tmp_path, worker_1=TRAINING if case == "working" else IDLE)
    try:
        if case == "not warned":  # the warning's annotation on worker 1 fails: its owner is never warned
            api.inject(Fault("PATCH", "/pods/ddp-worker-1", status=500, times=-1))
        if case == "kept":
            pod = api.store.get("pods", "ml", "ddp-worker-1")
            pod["metadata"]["annotations"]["steward.io/keep-until"] = "2099-01-01T00:00:00Z"
            api.store.put("pods", pod)
        outcomes = _sweep(cluster, api, deps, range(10, 141, 10))
        assert _job_patches(api) == [], outcomes
        assert api.store.get("pytorchjobs", "ml", "ddp")["spec"]["runPolicy"]["suspend"] is False
        assert not [e for e in _stops(deps, "ml/ddp-worker-1") if e.status == "executed"]
        assert "/api/v1/namespaces/ml/pods/ddp-worker-1/eviction" not in _real_evictions(api)
        first = [e for e in _stops(deps, "ml/ddp-worker-0") if e.status == "executed"]
        if case == "not warned":
            assert first and first[0].data["detail"].startswith("stopping: evicted"), outcomes
            assert "ml/ddp-worker-1 is not due for the same stop now" in first[0].data["detail"]
            assert _real_evictions(api) == ["/api/v1/namespaces/ml/pods/ddp-worker-0/eviction"]
        else:
            assert first == [] and _real_evictions(api) == [], outcomes
    finally:
        api.stop()
