"""An owner a person suspended while its controller is down: the pods keep running. A graceful stop that does nothing
must never be followed by a forced delete of a pod that was never sent SIGTERM."""
from agent.config.policy import Policy
from agent.graph.service import SweepService
from tests.test_kubernetes_sweep import _gang_world, _real_evictions, _stops


def test_no_forced_delete_of_a_pod_never_sent_sigterm(tmp_path):
    cluster, api, deps, job_uid = _gang_world(tmp_path)
    deps.policy = Policy.model_validate({"levels": {"max_auto": 3}})
    try:
        service = SweepService(deps)
        suspended = False
        for minute in range(10, 301, 10):
            cluster.advance_to(minute * 60)
            if not suspended:
                warned = {e.target for e in deps.audit.entries(kind="execution", limit=200)
                          if e.action == "notify" and e.status == "executed"}
                if {"ml/ddp-worker-0", "ml/ddp-worker-1"} <= warned:
                    # a person suspends the PyTorchJob; the training operator is down: its pods keep running
                    api.store.patch("pytorchjobs", "ml", "ddp", {"spec": {"runPolicy": {"suspend": True}}},
                                    "application/merge-patch+json")
                    suspended = True
            service.sweep()  # no run_training_operator: the operator is down
        assert suspended
        deletes = [p for _, p, q in api.calls("DELETE", "/pods/")]
        evicted = _real_evictions(api)
        summary = [(e.target, e.action, e.status, e.data.get("detail", "")[:160])
                   for e in deps.audit.entries(kind="execution", limit=200, newest_first=False)
                   if e.action != "notify"]
        print("SUMMARY", summary, deletes, evicted)
        for i in range(2):
            pod = f"/api/v1/namespaces/ml/pods/ddp-worker-{i}"
            if any(d.startswith(pod) for d in deletes):
                assert f"{pod}/eviction" in evicted, ("force-deleted without ever being sent SIGTERM", summary)
    finally:
        api.stop()


def test_a_stop_under_an_owner_suspended_but_not_acted_on_frees_the_gpus_or_says_it_did_not(tmp_path):
    """The same world: each pod's stop is recorded executed (its GPUs reclaimed) while both pods keep running, not
    terminating, to the end: a stop that freed nothing, recorded as done."""
    cluster, api, deps, job_uid = _gang_world(tmp_path)
    try:
        service = SweepService(deps)
        suspended = False
        for minute in range(10, 241, 10):
            cluster.advance_to(minute * 60)
            if not suspended:
                warned = {e.target for e in deps.audit.entries(kind="execution", limit=200)
                          if e.action == "notify" and e.status == "executed"}
                if {"ml/ddp-worker-0", "ml/ddp-worker-1"} <= warned:
                    api.store.patch("pytorchjobs", "ml", "ddp", {"spec": {"runPolicy": {"suspend": True}}},
                                    "application/merge-patch+json")
                    suspended = True
            service.sweep()
        running = [p["metadata"]["name"] for p in api.store.list("pods", "ml")
                   if not p["metadata"].get("deletionTimestamp")]
        done = [e for i in range(2) for e in _stops(deps, f"ml/ddp-worker-{i}") if e.status == "executed"]
        assert not (running and done), (running, [(e.target, e.data["gpus"], e.data["detail"][:90]) for e in done])
    finally:
        api.stop()
