"""A training job's, a JobSet's and a RayJob's pod is stopped by suspending that owner (tools/k8s_owners.py), as a
Job's is: evicting the pod would only have the controller start it again. The owner is suspended only when it is the
steward's to suspend (not Kueue's, and a RayJob KubeRay can suspend) and runs the judged pod alone, or runs others
whose own stop the caller found due too (stop_job's `siblings`: then once, for all of them); otherwise, and where
the cluster does not serve the owner's resource, the pod is evicted and the result says how to stop the workload. The real client against the loopback API; the controllers' part is run by the test
(tests/k8s_fake_cluster.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from agent.config.settings import Settings
from tests.k8s_fake_api import FakeKubernetesApi, Fault
from tests.k8s_fake_cluster import (
    gpu_node,
    jobset,
    kubeconfig,
    pdb,
    ray_cluster,
    ray_job,
    run_job_controller,
    run_jobset_controller,
    run_kuberay,
    run_training_operator,
    training_job,
)
from tests.zh_text import leftovers
from tools.kubernetes import kubernetes_scheduler_from_settings

NOW = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
TRAINING_KINDS = ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")


class FixedClock:
    def now(self) -> datetime:
        return NOW


def _server(**options) -> FakeKubernetesApi:
    server = FakeKubernetesApi(**options)
    server.store.now = lambda: NOW
    server.start()
    server.store.put("nodes", gpu_node("gpu-0", 8))
    return server


@pytest.fixture
def api():
    server = _server()
    yield server
    server.stop()


def _k8s(server: FakeKubernetesApi, tmp_path):
    return kubernetes_scheduler_from_settings(Settings(kubeconfig=kubeconfig(server, tmp_path), data_dir=tmp_path),
                                              clock=FixedClock())


def _evictions(api: FakeKubernetesApi, pod: str) -> list[dict]:
    return [q for _, _, q in api.calls("POST", f"/pods/{pod}/eviction") if q.get("dryRun") != ["All"]]


def _patches(api: FakeKubernetesApi, part: str = "") -> list[str]:
    return [p for _, p, _ in api.calls("PATCH", part)]


def _suspended(api: FakeKubernetesApi, plural: str, name: str, ns: str = "ml") -> bool:
    spec = api.store.get(plural, ns, name)["spec"]
    return bool((spec.get("runPolicy") or {}).get("suspend") if "runPolicy" in spec else spec.get("suspend"))


@pytest.mark.parametrize("kind", TRAINING_KINDS)
def test_a_single_replica_training_job_is_suspended_through_its_run_policy(api, tmp_path, kind):
    plural = f"{kind.lower()}s"
    (pod,) = training_job(api.store, "ml", "ft", kind=kind)
    uid = api.store.get(plural, "ml", "ft")["metadata"]["uid"]
    k8s = _k8s(api, tmp_path)
    result = k8s.stop_job("ml/ft-worker-0", force=False, grace_s=300, reason="idle", uid=pod["metadata"]["uid"])
    assert result.status == "stopping", result
    assert f"{kind} ml/ft (uid {uid}) suspended (spec.runPolicy.suspend=true)" in result.detail
    resume = (f"kubectl patch {kind.lower()} ft -n ml --type=merge "
              """-p '{"spec":{"runPolicy":{"suspend":false}}}'""")
    assert resume in result.detail
    assert _suspended(api, plural, "ft")
    assert _patches(api) == [f"/apis/kubeflow.org/v1/namespaces/ml/{plural}/ft"]
    # The pod itself is not evicted (the operator would create it again): a dry run asked the budgets.
    assert not _evictions(api, "ft-worker-0") and not api.calls("DELETE")
    assert run_training_operator(api.store) == ["ml/ft-worker-0"]
    again = k8s.stop_job("ml/ft-worker-0", force=False, grace_s=300, reason="idle")
    assert again.status == "stopping" and "was already suspended; nothing patched" in again.detail
    assert len(_patches(api)) == 1


def test_the_patch_is_guarded_by_the_owners_uid_and_resource_version(api, tmp_path):
    """A namesake created since the pod was started is refused; the API server refuses a stale uid (409); a job
    changed twice between read and patch is a refusal, never an eviction."""
    training_job(api.store, "ml", "ft")
    old = api.store.get("pytorchjobs", "ml", "ft")
    api.store.delete("pytorchjobs", "ml", "ft")
    api.store.put("pytorchjobs", {"metadata": {"name": "ft", "namespace": "ml"}, "spec": old["spec"]})
    k8s = _k8s(api, tmp_path)
    result = k8s.stop_job("ml/ft-worker-0", force=False, grace_s=300, reason="idle")
    assert result.status == "refused" and "not the same PyTorchJob" in result.detail
    assert old["metadata"]["uid"] in result.detail
    assert not _patches(api) and not _evictions(api, "ft-worker-0") and not _suspended(api, "pytorchjobs", "ft")

    from kubernetes import client, config

    objects = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kubeconfig(api, tmp_path))))
    for guard in ({"uid": old["metadata"]["uid"]}, {"resourceVersion": old["metadata"]["resourceVersion"]}):
        with pytest.raises(client.ApiException) as err:
            objects.patch_namespaced_custom_object("kubeflow.org", "v1", "ml", "pytorchjobs", "ft",
                                                   {"metadata": guard, "spec": {"runPolicy": {"suspend": True}}})
        assert err.value.status == 409 and "Precondition failed" in json.loads(err.value.body)["message"]
    assert not _suspended(api, "pytorchjobs", "ft")

    server = _server()
    try:
        training_job(server.store, "ml", "ft")
        server.inject(Fault("PATCH", "/pytorchjobs/ft", status=409, reason="Conflict", message="modified", times=2))
        result = _k8s(server, tmp_path).stop_job("ml/ft-worker-0", force=False, grace_s=300, reason="idle")
        assert result.status == "refused" and "the PyTorchJob ml/ft changed while it was being stopped" in result.detail
        assert len(_patches(server, "/pytorchjobs/ft")) == 2 and not _evictions(server, "ft-worker-0")
    finally:
        server.stop()


def test_one_pod_of_a_multi_replica_training_job_is_evicted_alone_never_the_job_suspended(api, tmp_path):
    """The replicas of one job are judged as one job, but the stop is asked for one pod, its siblings' not named due:
    suspending the job for it would stop replicas this stop was not asked for. The pod alone is evicted; the result
    and the warning say that the operator starts it again, and how to stop the job."""
    training_job(api.store, "ml", "ddp", replicas=4)
    k8s = _k8s(api, tmp_path)
    result = k8s.stop_job("ml/ddp-worker-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping" and result.detail.startswith("evicted"), result
    assert "its PyTorchJob ml/ddp runs 4 pods" in result.detail
    assert """kubectl patch pytorchjob ddp -n ml --type=merge -p '{"spec":{"runPolicy":{"suspend":true}}}'""" \
        in result.detail
    assert not _patches(api) and not _suspended(api, "pytorchjobs", "ddp")
    assert _evictions(api, "ddp-worker-0") and not _evictions(api, "ddp-worker-1")
    info = k8s.get_job("ml/ddp-worker-1")
    assert info is not None and "evicts this pod only" in k8s.stop_note(info, "en")
    assert "只驱逐该 Pod" in k8s.stop_note(info, "zh")


def test_a_training_job_kueue_admits_is_evicted_with_the_advice_not_patched(api, tmp_path):
    training_job(api.store, "ml", "ft", labels={"kueue.x-k8s.io/queue-name": "team-a"})
    k8s = _k8s(api, tmp_path)
    result = k8s.stop_job("ml/ft-worker-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping" and result.detail.startswith("evicted")
    assert "queued by Kueue, which resumes an admitted workload" in result.detail and "spec.active=false" in result.detail
    assert not _patches(api) and not _suspended(api, "pytorchjobs", "ft") and _evictions(api, "ft-worker-0")
    forced = k8s.stop_job("ml/ft-worker-0", force=True, grace_s=300, reason="zombie")
    assert forced.status == "stopped" and not _patches(api)


@pytest.mark.parametrize(("unserved", "build", "pod", "said"), [
    ("pytorchjobs.kubeflow.org", lambda s: training_job(s, "ml", "ft"), "ft-worker-0",
     """does not serve pytorchjobs.kubeflow.org/v1 (HTTP 404"""),
    ("jobsets.jobset.x-k8s.io", lambda s: jobset(s, "ml", "js"), "js-workers-0-0",
     "does not serve jobsets.jobset.x-k8s.io/v1alpha2 (HTTP 404"),
    ("rayjobs.ray.io", lambda s: ray_job(s, "ml", "rj"), "rj-raycluster-gpu-worker-0",
     "does not serve rayjobs.ray.io/v1 (HTTP 404"),
])
def test_a_crd_the_cluster_does_not_serve_falls_back_to_the_eviction_and_says_so(tmp_path, unserved, build, pod, said):
    server = _server(unserved=(unserved,))
    try:
        build(server.store)
        result = _k8s(server, tmp_path).stop_job(f"ml/{pod}", force=False, grace_s=300, reason="idle")
        assert result.status == "stopping" and result.detail.startswith("evicted"), result
        assert said in result.detail and "this pod alone is evicted" in result.detail
        assert "--type=merge -p" in result.detail and '"suspend":true' in result.detail  # how the owner stops it
        assert _evictions(server, pod) and not _patches(server)
    finally:
        server.stop()


def test_a_jobset_is_suspended_through_spec_suspend_not_its_child_job(api, tmp_path):
    """The JobSet controller would resume a child Job suspended on its own: the JobSet is what is suspended."""
    jobset(api.store, "ml", "js")
    uid = api.store.get("jobsets", "ml", "js")["metadata"]["uid"]
    k8s = _k8s(api, tmp_path)
    info = k8s.get_job("ml/js-workers-0-0")
    assert info is not None and "suspends its JobSet ml/js (spec.suspend=true)" in k8s.stop_note(info, "en")
    result = k8s.stop_job("ml/js-workers-0-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping", result
    assert f"JobSet ml/js (uid {uid}) suspended (spec.suspend=true)" in result.detail
    assert """kubectl patch jobset js -n ml --type=merge -p '{"spec":{"suspend":false}}'""" in result.detail
    assert _patches(api) == ["/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/js"]
    assert not api.store.get("jobs", "ml", "js-workers-0")["spec"]["suspend"] and not _evictions(api, "js-workers-0-0")
    assert run_jobset_controller(api.store) == ["ml/js-workers-0"]
    assert run_job_controller(api.store) == ["ml/js-workers-0-0"]


def test_one_pod_of_a_jobset_running_others_is_evicted_alone(api, tmp_path):
    jobset(api.store, "ml", "js", jobs=2)
    result = _k8s(api, tmp_path).stop_job("ml/js-workers-0-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping" and "its JobSet ml/js runs 2 pods" in result.detail
    assert not _patches(api) and _evictions(api, "js-workers-0-0") and not _evictions(api, "js-workers-1-0")


def test_a_rayjob_is_suspended_through_its_raycluster_never_the_cluster_patched(api, tmp_path):
    """A RayJob's pods are its RayCluster's: the cluster is read for the RayJob that created it, and the RayJob is
    suspended (KubeRay deletes the cluster). The head pod (no GPUs) is the cluster's plumbing, not another job."""
    ray_job(api.store, "ml", "rj")
    uid = api.store.get("rayjobs", "ml", "rj")["metadata"]["uid"]
    k8s = _k8s(api, tmp_path)
    result = k8s.stop_job("ml/rj-raycluster-gpu-worker-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping", result
    assert f"RayJob ml/rj (uid {uid}) suspended (spec.suspend=true)" in result.detail
    assert "submits the Ray job again from its start" in result.detail
    assert """kubectl patch rayjob rj -n ml --type=merge -p '{"spec":{"suspend":false}}'""" in result.detail
    assert _patches(api) == ["/apis/ray.io/v1/namespaces/ml/rayjobs/rj"]
    assert sorted(run_kuberay(api.store)) == ["ml/rj-raycluster-gpu-worker-0", "ml/rj-raycluster-head"]
    # A RayCluster no RayJob controls has no suspend the steward uses: evicted, and said how to stop it.
    ray_cluster(api.store, "ml", "rc")
    alone = k8s.stop_job("ml/rc-gpu-worker-0", force=False, grace_s=300, reason="idle")
    assert alone.detail.startswith("evicted") and "its RayCluster ml/rc starts a replacement pod" in alone.detail
    assert len(_patches(api)) == 1 and _evictions(api, "rc-gpu-worker-0")


@pytest.mark.parametrize(("build", "pod", "said"), [
    (lambda s: ray_job(s, "ml", "rj", shutdown=False), "rj-raycluster-gpu-worker-0",
     "KubeRay does not suspend RayJob ml/rj"),
    (lambda s: ray_job(s, "ml", "rj", gpu_workers=2), "rj-raycluster-gpu-worker-0",
     "its RayJob ml/rj runs 2 GPU pods"),
])
def test_a_ray_pod_the_steward_cannot_stop_through_a_rayjob_is_evicted_with_the_advice(api, tmp_path, build, pod, said):
    build(api.store)
    result = _k8s(api, tmp_path).stop_job(f"ml/{pod}", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping" and result.detail.startswith("evicted") and said in result.detail, result
    assert not _patches(api) and _evictions(api, pod)


def test_a_forced_stop_never_patches_the_training_job(api, tmp_path):
    """As for a Job: a forced stop deletes, with no grace, only a pod its suspended owner left terminating."""
    (pod,) = training_job(api.store, "ml", "ft")
    uid = pod["metadata"]["uid"]
    k8s = _k8s(api, tmp_path)
    refused = k8s.stop_job("ml/ft-worker-0", force=True, grace_s=300, reason="zombie", uid=uid)
    assert refused.status == "refused" and "running again" in refused.detail
    assert not _patches(api) and not api.calls("DELETE")
    assert k8s.stop_job("ml/ft-worker-0", force=False, grace_s=300, reason="idle", uid=uid).status == "stopping"
    unreached = k8s.stop_job("ml/ft-worker-0", force=True, grace_s=300, reason="zombie", uid=uid)
    assert unreached.status == "refused" and "never reached it" in unreached.detail
    api.store.delete("pods", "ml", "ft-worker-0", grace_s=3600)  # the operator deleted it: terminating
    result = k8s.stop_job("ml/ft-worker-0", force=True, grace_s=300, reason="zombie", uid=uid)
    assert result.status == "stopped" and result.detail.endswith("pod deleted with no grace period")
    assert len(_patches(api)) == 1


def test_a_disruption_budget_still_says_no_to_a_training_job_suspend(api, tmp_path):
    training_job(api.store, "ml", "ft")
    api.store.put("poddisruptionbudgets", pdb("ml", "ft-pdb", {"training.kubeflow.org/job-name": "ft"}, allowed=0))
    result = _k8s(api, tmp_path).stop_job("ml/ft-worker-0", force=False, grace_s=300, reason="idle")
    assert result.status == "refused" and "ft-pdb" in result.detail and "the PyTorchJob was not stopped" in result.detail
    assert not _patches(api) and not _suspended(api, "pytorchjobs", "ft")


def test_the_owners_warning_says_how_the_suspend_is_done_and_undone(api, tmp_path):
    training_job(api.store, "ml", "ft")
    ray_job(api.store, "ml", "rj")
    k8s = _k8s(api, tmp_path)
    jobs = {j.id: j for j in k8s.list_jobs()}
    ft, rj = jobs["ml/ft-worker-0"], jobs["ml/rj-raycluster-gpu-worker-0"]
    en = k8s.stop_note(ft, "en")
    assert "How: the steward suspends its PyTorchJob ml/ft (spec.runPolicy.suspend=true)" in en
    assert """kubectl patch pytorchjob ft -n ml --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}'""" in en
    assert "suspends its RayJob ml/rj (spec.suspend=true)" in k8s.stop_note(rj, "en")
    terms = {"Pod", "PyTorchJob", "RayJob", "RayCluster", "Job", "JobSet"}
    for job in (ft, rj):
        zh = k8s.stop_note(job, "zh")
        assert zh.startswith("停止方式") and leftovers(zh, terms) == [], (zh, leftovers(zh, terms))
    assert not _patches(api) and not api.calls("POST", "/eviction")  # a warning stops nothing


def test_a_forbidden_read_names_the_rule_to_add_and_evicts_nothing(api, tmp_path):
    """A role without the new rules (deploy/kubernetes/base/rbac.yaml) is told which to add: an eviction in place of
    the suspend would only have the controller start the pod again."""
    training_job(api.store, "ml", "ft")
    ray_job(api.store, "ml", "rj")
    api.inject(Fault("GET", "/pytorchjobs/ft", status=403, reason="Forbidden", message="forbidden", times=-1))
    api.inject(Fault("GET", "/rayclusters/", status=403, reason="Forbidden", message="forbidden", times=-1))
    k8s = _k8s(api, tmp_path)
    ft = k8s.stop_job("ml/ft-worker-0", force=False, grace_s=300, reason="idle")
    assert ft.status == "error" and "HTTP 403" in ft.detail
    assert '{apiGroups: ["kubeflow.org"], resources: ["pytorchjobs"], verbs: [get, patch]}' in ft.detail
    rj = k8s.stop_job("ml/rj-raycluster-gpu-worker-0", force=False, grace_s=300, reason="idle")
    assert rj.status == "error" and '{apiGroups: ["ray.io"], resources: ["rayclusters"], verbs: [get]}' in rj.detail
    assert not _patches(api) and not _evictions(api, "ft-worker-0") and not _evictions(api, "rj-raycluster-gpu-worker-0")


# A stop whose caller vouches for the other pods of the job (agent/graph/execute.py _due_siblings: each one's own stop
# passes the guardrail now, for the same reason, re-read idle with the job) suspends their shared owner once.
GANGS = [
    (lambda s: training_job(s, "ml", "ddp", replicas=2), "pytorchjobs", "ddp", "PyTorchJob",
     ["ddp-worker-0", "ddp-worker-1"], "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/ddp"),
    (lambda s: jobset(s, "ml", "js", jobs=2), "jobsets", "js", "JobSet", ["js-workers-0-0", "js-workers-1-0"],
     "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/js"),
    (lambda s: ray_job(s, "ml", "rj", gpu_workers=2), "rayjobs", "rj", "RayJob",
     ["rj-raycluster-gpu-worker-0", "rj-raycluster-gpu-worker-1"], "/apis/ray.io/v1/namespaces/ml/rayjobs/rj"),
]


def _uid(api: FakeKubernetesApi, pod: str) -> str:
    return api.store.get("pods", "ml", pod)["metadata"]["uid"]


@pytest.mark.parametrize(("build", "plural", "name", "kind", "pods", "path"), GANGS)
def test_a_job_whose_every_pod_is_due_is_suspended_once_for_all_of_them(api, tmp_path, build, plural, name, kind,
                                                                        pods, path):
    build(api.store)
    first, second = pods
    owner_uid = api.store.get(plural, "ml", name)["metadata"]["uid"]
    k8s = _k8s(api, tmp_path)
    result = k8s.stop_job(f"ml/{first}", force=False, grace_s=300, reason="idle", uid=_uid(api, first),
                          siblings={f"ml/{second}": _uid(api, second)})
    assert result.status == "stopping", result
    assert f"{kind} ml/{name} (uid {owner_uid}) suspended" in result.detail
    assert f"with it its other pod ml/{second}, each due for the same stop now" in result.detail
    assert result.covered == [f"ml/{second}"] and result.owner_uid == owner_uid
    assert _patches(api) == [path] and _suspended(api, plural, name)
    # Neither pod is evicted (the controller deletes them); a dry run asked each pod's budgets.
    assert not _evictions(api, first) and not _evictions(api, second)
    assert [p for _, p, q in api.calls("POST", "/eviction") if q.get("dryRun") == ["All"]] == [
        f"/api/v1/namespaces/ml/pods/{first}/eviction", f"/api/v1/namespaces/ml/pods/{second}/eviction"]
    # Once the controller deletes the pods (deletionTimestamp), the sibling's own stop, by this process or a restarted
    # one (a new client), patches nothing and evicts nothing.
    for pod in pods:
        api.store.delete("pods", "ml", pod, grace_s=300)  # what the controller does with a suspended job's pods
    for again in (k8s, _k8s(api, tmp_path)):
        other = again.stop_job(f"ml/{second}", force=False, grace_s=300, reason="idle", uid=_uid(api, second))
        assert other.status == "stopping" and "was already suspended; nothing patched" in other.detail, other
        assert other.covered == []
    assert len(_patches(api)) == 1 and not _evictions(api, second) and not _evictions(api, first)


@pytest.mark.parametrize(("build", "plural", "name", "kind", "pods", "path"), GANGS)
def test_a_pod_its_suspended_owners_controller_does_not_delete_is_evicted(api, tmp_path, build, plural, name, kind,
                                                                          pods, path):
    """A review: an owner suspended by hand while its operator is down leaves its pods running; a stop of one was
    recorded as done ("already suspended; nothing patched") and freed nothing. The pod is evicted; the owner is not
    patched again."""
    build(api.store)
    first, second = pods
    k8s = _k8s(api, tmp_path)
    k8s.stop_job(f"ml/{first}", force=False, grace_s=300, reason="idle", uid=_uid(api, first),
                 siblings={f"ml/{second}": _uid(api, second)})
    other = k8s.stop_job(f"ml/{second}", force=False, grace_s=300, reason="idle", uid=_uid(api, second))
    assert other.status == "stopping" and "already suspended but its controller has not deleted this pod" in (
        other.detail), other
    assert _evictions(api, second) and len(_patches(api)) == 1


@pytest.mark.parametrize(("build", "plural", "name", "kind", "pods", "path"), GANGS)
@pytest.mark.parametrize("vouched", ["none", "other uid", "other pod"])
def test_a_job_with_a_pod_not_due_is_not_suspended_and_the_pod_alone_is_evicted(api, tmp_path, build, plural, name,
                                                                               kind, pods, path, vouched):
    """A sibling the caller did not vouch for (not warned, kept, working: its own stop is not due), or vouched for
    under another uid (a replacement since), keeps the stop to the one pod, as before."""
    build(api.store)
    first, second = pods
    siblings = {"none": {}, "other uid": {f"ml/{second}": "uid-of-an-earlier-pod"},
                "other pod": {"ml/unrelated-0": "u"}}[vouched]
    result = _k8s(api, tmp_path).stop_job(f"ml/{first}", force=False, grace_s=300, reason="idle",
                                          siblings=siblings)
    assert result.status == "stopping" and result.detail.startswith("evicted"), result
    assert f"ml/{second} is not due for the same stop now" in result.detail and result.covered == []
    assert not _patches(api) and not _suspended(api, plural, name)
    assert _evictions(api, first) and not _evictions(api, second)


def test_a_budget_on_a_sibling_says_no_to_the_suspend_of_the_whole_job(api, tmp_path):
    training_job(api.store, "ml", "ddp", replicas=2)
    api.store.put("poddisruptionbudgets", pdb("ml", "w1-pdb", {"training.kubeflow.org/replica-index": "1"}, allowed=0))
    result = _k8s(api, tmp_path).stop_job("ml/ddp-worker-0", force=False, grace_s=300, reason="idle",
                                          siblings={"ml/ddp-worker-1": _uid(api, "ddp-worker-1")})
    assert result.status == "refused" and "w1-pdb" in result.detail, result
    assert not _patches(api) and not _suspended(api, "pytorchjobs", "ddp") and not _evictions(api, "ddp-worker-0")


def test_the_warning_of_a_multi_pod_job_says_it_is_suspended_once_every_pod_is_due(api, tmp_path):
    training_job(api.store, "ml", "ddp", replicas=2)
    k8s = _k8s(api, tmp_path)
    info = k8s.get_job("ml/ddp-worker-0")
    assert info is not None
    en, zh = k8s.stop_note(info, "en"), k8s.stop_note(info, "zh")
    assert "once every one of the 2 pods of its PyTorchJob ml/ddp is due to be stopped" in en
    assert """kubectl patch pytorchjob ddp -n ml --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}'""" in en
    assert "evicts this pod only" in en
    assert zh.startswith("停止方式") and "全部 2 个 Pod" in zh and "只驱逐该 Pod" in zh
    assert leftovers(zh, {"Pod", "PyTorchJob"}) == [], leftovers(zh, {"Pod", "PyTorchJob"})
    assert not _patches(api) and not api.calls("POST", "/eviction")


def test_a_forced_stop_after_the_whole_job_was_suspended_deletes_the_terminating_pod_and_patches_nothing(api, tmp_path):
    training_job(api.store, "ml", "ddp", replicas=2)
    k8s = _k8s(api, tmp_path)
    uid = _uid(api, "ddp-worker-1")
    k8s.stop_job("ml/ddp-worker-0", force=False, grace_s=300, reason="idle", siblings={"ml/ddp-worker-1": uid})
    api.store.delete("pods", "ml", "ddp-worker-1", grace_s=3600)  # the operator deleted it; it ignores SIGTERM
    result = k8s.stop_job("ml/ddp-worker-1", force=True, grace_s=300, reason="zombie", uid=uid)
    assert result.status == "stopped" and "PyTorchJob ml/ddp" in result.detail and "already suspended" in \
        result.detail and result.detail.endswith("pod deleted with no grace period"), result
    assert len(_patches(api)) == 1 and not _evictions(api, "ddp-worker-1")
