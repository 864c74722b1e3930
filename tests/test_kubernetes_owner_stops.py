"""A stop acts on the object that would otherwise undo it (tools/k8s_owners.py): a Kubeflow notebook's pod through its
Notebook, a Job's pod through its Job, never an eviction its controller undoes; the real client against the loopback
API. The controllers' part (the Job controller deleting a suspended Job's pods, the notebook controller scaling a
stopped notebook to zero) is run by the test (tests/k8s_fake_cluster.py), as the fake is only the API server."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pytest

from agent.config.settings import Settings
from core.cluster import JobInfo
from tests.k8s_fake_api import FakeKubernetesApi, Fault
from tests.k8s_fake_cluster import (
    batch_job,
    gpu_node,
    gpu_pod,
    kubeconfig,
    kubeflow_notebook,
    pdb,
    run_job_controller,
    run_notebook_controller,
)
from tests.zh_text import leftovers
from tools.k8s_owners import NOTEBOOK_STOPPED, stop_note
from tools.kubernetes import kubernetes_scheduler_from_settings

NOW = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
STAMP = "2026-11-02T03:00:00Z"
RESUME_JOB = """kubectl patch job train -n ml --type=merge -p '{"spec":{"suspend":false}}'"""
FORBIDDEN = ('jobs.batch "train" is forbidden: User "system:serviceaccount:gpu-steward:gpu-steward" cannot patch '
             'resource "jobs" in API group "batch" in the namespace "ml"')


class FixedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


def _server(**options) -> FakeKubernetesApi:
    server = FakeKubernetesApi(**options)
    server.store.now = lambda: NOW
    server.start()
    s = server.store
    s.put("nodes", gpu_node("gpu-0", 8))
    kubeflow_notebook(s, "kf", "nb", 1)  # the notebook holding an A100 all night
    s.put("jobs", batch_job("ml", "train"))
    s.put("pods", gpu_pod("ml", "train-0", 4, owner=("Job", "train"), labels={"job-name": "train"}))
    return server


@pytest.fixture
def api():
    server = _server()
    yield server
    server.stop()


def _k8s(server: FakeKubernetesApi, tmp_path):
    return kubernetes_scheduler_from_settings(Settings(kubeconfig=kubeconfig(server, tmp_path), data_dir=tmp_path),
                                              clock=FixedClock(NOW))


def _evictions(api: FakeKubernetesApi, pod: str) -> list[dict]:
    """Real evictions of `pod` (not the dry runs that ask whether a PodDisruptionBudget allows one)."""
    return [q for _, _, q in api.calls("POST", f"/pods/{pod}/eviction") if q.get("dryRun") != ["All"]]


def _patches(api: FakeKubernetesApi, part: str) -> list[str]:
    return [p for _, p, _ in api.calls("PATCH", part)]


def test_a_notebook_is_stopped_through_its_notebook_as_kubeflows_culler_does(api, tmp_path):
    k8s = _k8s(api, tmp_path)
    pod = api.store.get("pods", "kf", "nb-0")
    nb_uid = api.store.get("notebooks", "kf", "nb")["metadata"]["uid"]
    result = k8s.stop_job("kf/nb-0", force=False, grace_s=300, reason="idle", uid=pod["metadata"]["uid"])
    assert result.status == "stopping", result
    assert f"Notebook kf/nb (uid {nb_uid}) stopped as Kubeflow's idle culler does" in result.detail
    assert "kubectl annotate notebook nb -n kf kubeflow-resource-stopped-" in result.detail
    notebook = api.store.get("notebooks", "kf", "nb")
    assert notebook["metadata"]["annotations"][NOTEBOOK_STOPPED] == STAMP  # RFC 3339, as the culler writes it
    assert _patches(api, "/notebooks/") == ["/apis/kubeflow.org/v1/namespaces/kf/notebooks/nb"]
    # The pod itself is not evicted (its StatefulSet would start it again at once): a dry run asked the budgets.
    assert not _evictions(api, "nb-0") and not api.calls("DELETE")
    assert "deletionTimestamp" not in api.store.get("pods", "kf", "nb-0")["metadata"]

    # The notebook controller scales the StatefulSet to 0: the pod goes with its grace period, the volume stays.
    assert run_notebook_controller(api.store) == ["kf/nb-0"]
    assert api.store.get("statefulsets", "kf", "nb")["spec"]["replicas"] == 0
    # Asked again (an answer lost, a retry): said so, no second patch.
    again = k8s.stop_job("kf/nb-0", force=False, grace_s=300, reason="idle")
    assert again.status == "stopping" and "was already stopped" in again.detail and "nothing patched" in again.detail
    assert len(_patches(api, "/notebooks/")) == 1
    # The owner resumes it (the Kubeflow UI removes the annotation): the notebook controller starts it again.
    api.store.patch("notebooks", "kf", "nb", {"metadata": {"annotations": {NOTEBOOK_STOPPED: None}}},
                    "application/merge-patch+json")
    run_notebook_controller(api.store)
    assert api.store.get("statefulsets", "kf", "nb")["spec"]["replicas"] == 1


def test_a_recreated_namesake_notebook_is_refused(api, tmp_path):
    """The pod's StatefulSet names its Notebook by uid: a Notebook deleted and created again under the name (someone
    else's now, or a fresh start) is not the one whose pod was judged idle."""
    k8s = _k8s(api, tmp_path)
    old = api.store.get("notebooks", "kf", "nb")
    api.store.delete("notebooks", "kf", "nb")
    api.store.put("notebooks", {"metadata": {"name": "nb", "namespace": "kf"}, "spec": old["spec"]})
    new_uid = api.store.get("notebooks", "kf", "nb")["metadata"]["uid"]
    result = k8s.stop_job("kf/nb-0", force=False, grace_s=300, reason="idle")
    assert result.status == "refused"
    assert f"not the same Notebook: kf/nb is now uid {new_uid}" in result.detail
    assert old["metadata"]["uid"] in result.detail
    assert not _patches(api, "/notebooks/") and not _evictions(api, "nb-0")
    assert NOTEBOOK_STOPPED not in (api.store.get("notebooks", "kf", "nb")["metadata"].get("annotations") or {})


def test_the_patch_carries_the_uid_and_a_conflict_is_read_again_once(api, tmp_path):
    """A 409 (the notebook controller wrote the Notebook between the read and the patch) reads it again once; a second
    409 is a refusal, retried at a later sweep, never an eviction."""
    k8s = _k8s(api, tmp_path)
    api.inject(Fault("PATCH", "/notebooks/nb", status=409, reason="Conflict", message="the object has been modified"))
    assert k8s.stop_job("kf/nb-0", force=False, grace_s=300, reason="idle").status == "stopping"
    assert len(api.calls("GET", "/notebooks/nb")) == 2 and len(_patches(api, "/notebooks/nb")) == 2

    server = _server()
    try:
        k8s = _k8s(server, tmp_path)
        server.inject(Fault("PATCH", "/jobs/train", status=409, reason="Conflict", message="modified", times=2))
        result = k8s.stop_job("ml/train-0", force=False, grace_s=300, reason="idle")
        assert result.status == "refused" and "the Job ml/train changed while it was being stopped" in result.detail
        assert not _evictions(server, "train-0")
    finally:
        server.stop()


def test_a_stale_uid_in_the_patch_is_a_conflict_at_the_api_server(api, tmp_path):
    """What the precondition buys: the API server refuses (409) a patch whose uid is not the object's."""
    from kubernetes import client, config

    objects = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kubeconfig(api, tmp_path))))
    with pytest.raises(client.ApiException) as err:
        objects.patch_namespaced_custom_object("batch", "v1", "ml", "jobs", "train",
                                               {"metadata": {"uid": "someone-else"}, "spec": {"suspend": True}})
    assert err.value.status == 409 and "Precondition failed" in json.loads(err.value.body)["message"]
    assert api.store.get("jobs", "ml", "train")["spec"]["suspend"] is False


def test_a_job_is_suspended_not_its_pod_evicted(api, tmp_path):
    k8s = _k8s(api, tmp_path)
    result = k8s.stop_job("ml/train-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping", result
    assert "Job ml/train (uid uid-train) suspended (spec.suspend=true)" in result.detail and RESUME_JOB in result.detail
    assert api.store.get("jobs", "ml", "train")["spec"]["suspend"] is True
    assert _patches(api, "/jobs/") == ["/apis/batch/v1/namespaces/ml/jobs/train"]
    assert not _evictions(api, "train-0") and not api.calls("DELETE")
    # The Job controller deletes the pod with its own grace period, and creates none while suspended.
    assert run_job_controller(api.store) == ["ml/train-0"]
    assert k8s.get_job("ml/train-0").state == "stopping"
    again = k8s.stop_job("ml/train-0", force=False, grace_s=300, reason="idle")
    assert again.status == "stopping" and "was already suspended; nothing patched" in again.detail
    assert len(_patches(api, "/jobs/")) == 1


def test_a_forced_stop_deletes_only_a_pod_its_stopped_job_left_terminating(api, tmp_path):
    """A forced stop never patches the owner: after the graceful stop suspended the Job, a pod still terminating
    (it ignored SIGTERM) is deleted with no grace; a Job its owner resumed, or a pod the stop never reached, is
    refused (review, eleventh round: a resumed Job was suspended again and a new pod nobody was warned about went)."""
    k8s = _k8s(api, tmp_path)
    uid = api.store.get("pods", "ml", "train-0")["metadata"]["uid"]
    # Never stopped gracefully (or resumed since): nothing forced, nothing patched.
    refused = k8s.stop_job("ml/train-0", force=True, grace_s=300, reason="zombie", uid=uid)
    assert refused.status == "refused" and "running again" in refused.detail
    assert not _patches(api, "/jobs/") and not api.calls("DELETE")
    assert k8s.stop_job("ml/train-0", force=False, grace_s=300, reason="idle", uid=uid).status == "stopping"
    # Suspended, but its controller has not reached the pod: it never got SIGTERM.
    unreached = k8s.stop_job("ml/train-0", force=True, grace_s=300, reason="zombie", uid=uid)
    assert unreached.status == "refused" and "never reached it" in unreached.detail and not api.calls("DELETE")
    api.store.delete("pods", "ml", "train-0", grace_s=3600)  # its controller deleted it: terminating
    patches = len(_patches(api, "/jobs/"))
    result = k8s.stop_job("ml/train-0", force=True, grace_s=300, reason="zombie", uid=uid)
    assert result.status == "stopped" and result.detail.endswith("pod deleted with no grace period")
    (_, _, query), = api.calls("DELETE", "/pods/train-0")
    assert query["gracePeriodSeconds"] == ["0"] and len(_patches(api, "/jobs/")) == patches


def test_one_pod_of_a_job_running_others_is_evicted_alone_never_its_job_suspended(api, tmp_path):
    """A parallel Job's workers are judged one by one: suspending the Job for an idle one would stop its busy
    siblings, never judged nor warned about (review, eleventh round). The pod alone is evicted, and the warning
    says so."""
    job = api.store.get("jobs", "ml", "train")
    sibling = copy.deepcopy(api.store.get("pods", "ml", "train-0"))
    sibling["metadata"].update(name="train-1", uid="uid-train-1")
    api.store.put("pods", sibling)
    k8s = _k8s(api, tmp_path)
    result = k8s.stop_job("ml/train-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping" and "runs 2 pods" in result.detail, result
    assert not _patches(api, "/jobs/") and api.store.get("jobs", "ml", "train")["spec"]["suspend"] is False
    assert _evictions(api, "train-0") and not _evictions(api, "train-1")
    info = k8s.get_job("ml/train-0")
    assert info is not None and "evicts this pod only" in k8s.stop_note(info, "en")
    assert "只驱逐该 Pod" in k8s.stop_note(info, "zh")
    assert job["metadata"]["uid"]


def test_a_replaced_pod_is_not_suspended_through_its_job(api, tmp_path):
    """The pod's own uid is checked first: a replacement pod under the name is not the pod judged idle."""
    k8s = _k8s(api, tmp_path)
    result = k8s.stop_job("ml/train-0", force=False, grace_s=300, reason="idle", uid="uid-of-an-earlier-pod")
    assert result.status == "refused" and "not the same pod" in result.detail
    assert not _patches(api, "/jobs/") and api.store.get("jobs", "ml", "train")["spec"]["suspend"] is False


def test_a_forbidden_patch_names_the_rule_to_add_and_evicts_nothing(api, tmp_path):
    k8s = _k8s(api, tmp_path)
    api.inject(Fault("PATCH", "/jobs/train", status=403, reason="Forbidden", message=FORBIDDEN, times=-1))
    result = k8s.stop_job("ml/train-0", force=False, grace_s=300, reason="idle")
    assert result.status == "error"
    assert 'add the rule {apiGroups: ["batch"], resources: ["jobs"], verbs: [get, patch]}' in result.detail
    assert "HTTP 403" in result.detail and "cannot patch" in result.detail
    assert not _evictions(api, "train-0") and not api.calls("DELETE")
    assert api.store.get("jobs", "ml", "train")["spec"]["suspend"] is False
    # Forced too: the Job was never stopped, so nothing is deleted.
    assert k8s.stop_job("ml/train-0", force=True, grace_s=300, reason="zombie").status == "refused"
    assert not api.calls("DELETE")

    api.inject(Fault("GET", "/notebooks/nb", status=403, reason="Forbidden", message="forbidden", times=-1))
    nb = k8s.stop_job("kf/nb-0", force=False, grace_s=300, reason="idle")
    assert nb.status == "error" and '{apiGroups: ["kubeflow.org"], resources: ["notebooks"]' in nb.detail
    assert not _evictions(api, "nb-0")


def test_an_unserved_notebook_resource_is_an_error_not_an_eviction(tmp_path):
    """A cluster without the Notebook CRD (or no longer serving the version the StatefulSet's ownerReference names)
    answers 404 for the path: the stop says so, and the pod is left to its StatefulSet, not evicted in vain."""
    server = _server(unserved=("notebooks.kubeflow.org",))
    try:
        result = _k8s(server, tmp_path).stop_job("kf/nb-0", force=False, grace_s=300, reason="idle")
        assert result.status == "error" and "does not serve notebooks.kubeflow.org/v1" in result.detail
        assert not _evictions(server, "nb-0")
    finally:
        server.stop()
    server = _server()
    try:
        kubeflow_notebook(server.store, "kf", "old", 1, version="v1beta1")  # the fake serves v1 only
        result = _k8s(server, tmp_path).stop_job("kf/old-0", force=False, grace_s=300, reason="idle")
        assert result.status == "error" and "notebooks.kubeflow.org/v1beta1" in result.detail
        assert not _evictions(server, "old-0")
    finally:
        server.stop()


def test_a_disruption_budget_still_says_no(api, tmp_path):
    """The Job controller deletes a suspended Job's pods without asking the budgets: a dry-run eviction asks first."""
    api.store.put("poddisruptionbudgets", pdb("ml", "train-pdb", {"job-name": "train"}, allowed=0))
    result = _k8s(api, tmp_path).stop_job("ml/train-0", force=False, grace_s=300, reason="idle")
    assert result.status == "refused" and "train-pdb" in result.detail and "the Job was not stopped" in result.detail
    assert api.store.get("jobs", "ml", "train")["spec"]["suspend"] is False
    (_, _, query), = api.calls("POST", "/pods/train-0/eviction")
    assert query["dryRun"] == ["All"] and "deletionTimestamp" not in api.store.get("pods", "ml", "train-0")["metadata"]


@pytest.mark.parametrize(("owner", "labels", "said"), [
    (("jobset.x-k8s.io/v1alpha2", "JobSet", "sweep"), {}, "managed by JobSet ml/sweep, which resumes"),
    (None, {"kueue.x-k8s.io/queue-name": "team-a"}, "queued by Kueue, which resumes an admitted Job"),
])
def test_a_job_another_controller_resumes_is_evicted_and_the_result_says_how_to_stop_it(api, tmp_path, owner, labels,
                                                                                         said):
    api.store.put("jobs", batch_job("ml", "train", owner=owner, labels=labels))
    result = _k8s(api, tmp_path).stop_job("ml/train-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping" and said in result.detail and result.detail.startswith("evicted")
    assert api.store.get("jobs", "ml", "train")["spec"]["suspend"] is False and _evictions(api, "train-0")


def test_a_pod_whose_owner_is_gone_is_evicted_and_the_result_says_why(api, tmp_path):
    api.store.delete("jobs", "ml", "train")
    result = _k8s(api, tmp_path).stop_job("ml/train-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping" and "its Job ml/train no longer exists, so nothing starts the pod" in result.detail
    assert _evictions(api, "train-0")


def test_other_controllers_are_evicted_as_before_and_the_result_says_how_to_stop_them(api, tmp_path):
    api.store.put("pods", gpu_pod("ml", "ddp-worker-0", 8, owner=("PyTorchJob", "ddp"),
                                  labels={"training.kubeflow.org/job-name": "ddp"}))
    api.store.put("pods", gpu_pod("ml", "db-0", 1, owner=("StatefulSet", "db")))
    k8s = _k8s(api, tmp_path)
    ddp = k8s.stop_job("ml/ddp-worker-0", force=False, grace_s=300, reason="idle")
    assert ddp.status == "stopping" and "its PyTorchJob ml/ddp starts a replacement pod" in ddp.detail
    assert """kubectl patch pytorchjob ddp -n ml --type=merge -p '{"spec":{"runPolicy":{"suspend":true}}}'""" in ddp.detail
    db = k8s.stop_job("ml/db-0", force=False, grace_s=300, reason="idle")
    assert "kubectl scale statefulset db -n ml --replicas=0" in db.detail
    assert _evictions(api, "ddp-worker-0") and _evictions(api, "db-0")


def _job(owner_kind: str, name: str, labels: dict[str, str]) -> JobInfo:
    return JobInfo(id=f"ml/{name}", scheduler="kubernetes", namespace="ml", name=name, user="u", project="p", gpus=1,
                   state="running", owner_kind=owner_kind, labels=labels)


def test_the_owners_warning_says_how_the_stop_is_done_and_how_to_resume(api, tmp_path):
    k8s = _k8s(api, tmp_path)
    notebook = k8s.list_jobs()
    nb = next(j for j in notebook if j.id == "kf/nb-0")
    assert "kubectl annotate notebook nb -n kf kubeflow-resource-stopped-" in k8s.stop_note(nb, "en")
    assert "Kubeflow notebooks page" in k8s.stop_note(nb, "en")
    train = next(j for j in notebook if j.id == "ml/train-0")
    assert RESUME_JOB in k8s.stop_note(train, "en") and "suspends its Job ml/train" in k8s.stop_note(train, "en")
    sts = _job("StatefulSet", "db-0", {})
    assert "kubectl scale statefulset db -n ml --replicas=0" in stop_note(sts, "en")
    assert stop_note(_job("Pod", "adhoc", {}), "en") == ""
    terms = {"Kubeflow", "Notebook", "Job", "StatefulSet", "PyTorchJob", "JobSet", "Pod"}
    for job in (nb, train, sts, _job("PyTorchJob", "ddp-worker-0", {"training.kubeflow.org/job-name": "ddp"}),
                _job("Job", "x-0", {"jobset.sigs.k8s.io/jobset-name": "x", "job-name": "x-w"})):
        zh = stop_note(job, "zh")
        assert zh and leftovers(zh, terms) == [], (zh, leftovers(zh, terms))
