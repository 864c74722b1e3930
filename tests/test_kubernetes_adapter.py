"""KubernetesScheduler and KubernetesEventNotifier, with the real kubernetes client against the loopback fake API."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from agent.config.settings import Settings
from tests.k8s_fake_api import FakeKubernetesApi
from tests.k8s_fake_cluster import batch_job, gpu_node, gpu_pod, kubeconfig, kubeflow_notebook, pdb
from tools.k8s_notify import STOP_AFTER, kubernetes_notifier_from_settings
from tools.kubernetes import kubernetes_scheduler_from_settings, parse_log_line
from tools.protocols import JobScheduler, LogSource, Notifier

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


class FixedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


@pytest.fixture
def api():
    clock = FixedClock(NOW)
    server = FakeKubernetesApi()
    server.store.now = clock.now
    server.clock = clock  # type: ignore[attr-defined]
    server.start()
    s = server.store
    s.put("nodes", gpu_node("gpu-0", 8, pool="a100"))
    s.put("nodes", gpu_node("gpu-1", 8, pool="a100"))
    s.put("nodes", {"metadata": {"name": "cpu-0"}, "status": {"capacity": {"cpu": "16"}}})
    s.put("jobs", batch_job("ml", "train"))
    s.put("pods", gpu_pod("ml", "train-0", 4, owner=("Job", "train"), started=NOW - timedelta(hours=2),
                          labels={"steward.io/owner": "alice", "steward.io/project": "llm", "job-name": "train",
                                  "steward.io/priority": "high"}))
    s.put("pods", gpu_pod("ml", "serve-7d9f8-abcde", 1, node="gpu-1", owner=("ReplicaSet", "serve-7d9f8"),
                          labels={"pod-template-hash": "7d9f8", "app": "serve"}))
    kubeflow_notebook(s, "kf", "nb", 1, node="gpu-1", annotations={"steward.io/owner": "bob"})
    s.put("pods", gpu_pod("ml", "queued", 8, phase="Pending"))
    s.put("pods", gpu_pod("ml", "cpu-only", 0))
    s.put("pods", {**gpu_pod("ml", "done", 2), "status": {"phase": "Succeeded"}})
    s.put("poddisruptionbudgets", pdb("ml", "serve-pdb", {"app": "serve"}, allowed=0))
    s.logs[("ml", "train-0")] = [(NOW - timedelta(minutes=m), f"step {100 - m} loss=0.{m}") for m in (90, 30, 10, 1)]
    yield server
    server.stop()


@pytest.fixture
def settings(api, tmp_path):
    return Settings(kubeconfig=kubeconfig(api, tmp_path), data_dir=tmp_path)


def test_lists_gpu_pods_with_one_call_and_reads_owners(api, settings):
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    assert isinstance(k8s, JobScheduler) and isinstance(k8s, LogSource)
    jobs = {j.id: j for j in k8s.list_jobs()}
    assert set(jobs) == {"ml/train-0", "ml/serve-7d9f8-abcde", "kf/nb-0", "ml/queued"}
    assert k8s.api_calls == 1
    (_, path, query), = api.calls("GET", "/pods")
    assert path == "/api/v1/pods" and query["fieldSelector"] == ["status.phase!=Succeeded,status.phase!=Failed"]
    train = jobs["ml/train-0"]
    assert (train.user, train.project, train.gpus, train.node, train.owner_kind) == ("alice", "llm", 4, "gpu-0", "Job")
    assert train.started_at == NOW - timedelta(hours=2) and train.state == "running" and train.priority == "high"
    assert jobs["ml/queued"].priority == "normal"
    assert jobs["ml/serve-7d9f8-abcde"].owner_kind == "Deployment"
    assert (jobs["kf/nb-0"].owner_kind, jobs["kf/nb-0"].user, jobs["kf/nb-0"].project) == ("Notebook", "bob", "kf")
    assert (jobs["ml/queued"].state, jobs["ml/queued"].node) == ("pending", None)


def test_a_pods_owner_is_read_with_its_name_and_uid(api, settings):
    """The pods of one controller are one job (agent/detectors/gang.py): a DLRover worker's ownerReference (its
    ElasticJob, set without the controller flag) gives its kind, name and uid; a Deployment's pod names the
    Deployment."""
    dlrover = gpu_pod("llm", "sft-edljob-worker-1", 8, labels={"elasticjob.dlrover/name": "sft"})
    dlrover["metadata"]["ownerReferences"] = [{"apiVersion": "elastic.iml.github.io/v1alpha1", "kind": "ElasticJob",
                                               "name": "sft", "uid": "3f1c-sft", "blockOwnerDeletion": True}]
    api.store.put("pods", dlrover)
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    jobs = {j.id: j for j in k8s.list_jobs()}
    worker = jobs["llm/sft-edljob-worker-1"]
    assert (worker.owner_kind, worker.owner_name, worker.owner_uid) == ("ElasticJob", "sft", "3f1c-sft")
    serve = jobs["ml/serve-7d9f8-abcde"]
    assert (serve.owner_kind, serve.owner_name, serve.owner_uid) == ("Deployment", "serve", "uid-serve-7d9f8")
    assert (jobs["ml/queued"].owner_name, jobs["ml/queued"].owner_uid) == (None, "")


def test_pods_without_gpus_of_a_distributed_job_are_listed_with_it(api, settings):
    """A RayJob's head and CPU workers (no GPUs) decide whether its GPU workers wait (agent/detectors/gang.py); listed
    only GPU pods, a Ray Train job's GPU workers waiting on its CPU shuffle were stopped. A pod without GPUs of no
    GPU job's gang stays out."""
    ray = {"ray.io/cluster": "sft", "ray.io/node-type": "worker"}
    api.store.put("pods", gpu_pod("rec", "sft-gpu-a", 4, labels=ray))
    api.store.put("pods", gpu_pod("rec", "sft-cpu-a", 0, labels=ray))
    api.store.put("pods", gpu_pod("rec", "sft-head", 0, labels={**ray, "ray.io/node-type": "head"}))
    api.store.put("pods", gpu_pod("other", "sft-cpu-b", 0, labels=ray))  # same value, another namespace
    api.store.put("pods", gpu_pod("rec", "etl-head", 0, labels={"ray.io/cluster": "etl"}))  # a CPU-only Ray cluster
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    jobs = {j.id: j for j in k8s.list_jobs()}
    assert {"rec/sft-gpu-a", "rec/sft-cpu-a", "rec/sft-head"} <= set(jobs)
    assert not {"other/sft-cpu-b", "rec/etl-head", "ml/cpu-only"} & set(jobs)
    assert jobs["rec/sft-cpu-a"].gpus == 0 and k8s.api_calls == 1


def test_nodes_reuse_the_sweeps_pod_list(api, settings):
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    k8s.list_jobs()
    nodes = {n.name: n for n in k8s.list_nodes()}
    assert k8s.api_calls == 2
    assert set(nodes) == {"gpu-0", "gpu-1"}  # the CPU node is not the steward's business
    assert nodes["gpu-1"].jobs == ["kf/nb-0", "ml/serve-7d9f8-abcde"]
    assert (nodes["gpu-0"].pool, nodes["gpu-0"].gpus, nodes["gpu-0"].gpu_model) == ("a100", 8, "NVIDIA-A100-SXM4-80GB")


def test_nodes_for_a_removal_are_read_now_with_every_workload_on_them(api, settings):
    """What removing a node is decided on: every node, each with every pod bound to it, GPU or not, from a pod list
    made right then; the pods that belong to the node (a DaemonSet's, a static pod's mirror) go with it."""
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    k8s.list_jobs()  # the sweep's pod list
    api.store.put("pods", gpu_pod("ml", "late", 8, node="gpu-1"))  # since then
    api.store.put("pods", gpu_pod("kube-system", "dcgm-x1", 0, node="gpu-1", owner=("DaemonSet", "dcgm")))
    api.store.put("pods", gpu_pod("kube-system", "etcd-cpu-0", 0, node="cpu-0",
                                  annotations={"kubernetes.io/config.mirror": "abc"}))
    calls = k8s.api_calls
    nodes = {n.name: n for n in k8s.list_nodes(for_removal=True)}
    assert k8s.api_calls == calls + 2  # the nodes and a new pod list
    assert nodes["gpu-0"].jobs == ["ml/cpu-only", "ml/train-0"]  # a CPU pod holds its node too
    assert nodes["gpu-1"].jobs == ["kf/nb-0", "ml/late", "ml/serve-7d9f8-abcde"]
    assert nodes["cpu-0"].jobs == []
    assert "ml/late" not in {n.name: n for n in k8s.list_nodes()}["gpu-1"].jobs  # the sweep's list, as before


def test_get_job_reads_one_pod_and_none_when_gone(api, settings):
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    assert k8s.get_job("ml/train-0").gpus == 4
    assert k8s.get_job("ml/nope") is None
    assert k8s.get_job("ml/done").state == "completed"
    with pytest.raises(ValueError, match="namespace/pod"):
        k8s.get_job("no-slash")


def test_logs_ask_the_server_for_a_window_and_keep_the_newest(api, settings):
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    lines = k8s.tail("ml/train-0", NOW - timedelta(minutes=45), NOW - timedelta(minutes=5), limit=10)
    assert [line.text for line in lines] == ["step 70 loss=0.30", "step 90 loss=0.10"]
    (_, _, query), = api.calls("GET", "/log")
    assert query["sinceSeconds"] == ["2700"] and query["timestamps"] == ["true"]
    assert len(k8s.tail("ml/train-0", NOW - timedelta(hours=3), NOW, limit=1)) == 1
    assert k8s.tail("ml/gone", NOW - timedelta(hours=1), NOW) == []
    line = parse_log_line("2026-11-02T11:59:00.123456789Z loss=0.5 step 3")
    assert line and line.text == "loss=0.5 step 3" and line.at.microsecond == 123456


def test_graceful_stop_evicts_with_the_policy_grace(api, settings):
    """A pod nothing replaces (a bare pod) is evicted; a Job's or a notebook's is stopped through its owner
    (tests/test_kubernetes_owner_stops.py)."""
    api.store.put("pods", gpu_pod("ml", "adhoc-0", 2, started=NOW - timedelta(hours=1)))
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    result = k8s.stop_job("ml/adhoc-0", force=False, grace_s=300, reason="idle")
    assert result.status == "stopping" and result.detail == "evicted; terminating with a 300s grace period"
    assert api.calls("POST", "/api/v1/namespaces/ml/pods/adhoc-0/eviction") and not api.calls("DELETE")
    job = k8s.get_job("ml/adhoc-0")
    assert job.state == "stopping" and job.stop_requested_at == NOW
    api.clock.at = NOW + timedelta(seconds=301)  # the grace period runs out: the kubelet is done
    assert k8s.stop_job("ml/adhoc-0", force=False, grace_s=300, reason="idle").status == "already_gone"
    assert k8s.stop_job("ml/queued", force=False, grace_s=300, reason="idle").status == "stopped"


def test_a_disruption_budget_refuses_the_eviction(api, settings):
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    result = k8s.stop_job("ml/serve-7d9f8-abcde", force=False, grace_s=60, reason="idle")
    assert result.status == "refused"
    assert "disruption budget" in result.detail and "serve-pdb" in result.detail
    assert k8s.get_job("ml/serve-7d9f8-abcde").state == "running"


def test_forced_stop_deletes_with_no_grace_and_is_idempotent(api, settings):
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    # The graceful stop first (the guardrail's order): its Notebook, else its StatefulSet starts the pod again at
    # once; the pod ignores SIGTERM and is still terminating when the forced stop deletes it with no grace.
    assert k8s.stop_job("kf/nb-0", force=False, grace_s=300, reason="idle").status == "stopping"
    api.store.delete("pods", "kf", "nb-0", grace_s=3600)  # its controller deleted it: terminating
    stopped = k8s.stop_job("kf/nb-0", force=True, grace_s=300, reason="zombie")
    assert stopped.status == "stopped" and stopped.detail.endswith("pod deleted with no grace period")
    assert "kubeflow-resource-stopped" in api.store.get("notebooks", "kf", "nb")["metadata"]["annotations"]
    (_, _, query), = api.calls("DELETE", "/pods/nb-0")
    assert query["gracePeriodSeconds"] == ["0"]
    assert k8s.get_job("kf/nb-0") is None
    assert k8s.stop_job("kf/nb-0", force=True, grace_s=300, reason="zombie").status == "already_gone"


def test_warning_posts_an_event_and_annotates_the_deadline(api, settings):
    notifier = kubernetes_notifier_from_settings(settings, notice_s=1800, clock=api.clock)
    assert isinstance(notifier, Notifier)
    sent = notifier.notify("alice", "GPU Steward: ml/train-0", "idle for 1h; stops after 12:30", job_id="ml/train-0")
    assert sent.status == "sent" and sent.channel == "kubernetes-event"
    (event,) = api.store.list("events", "ml")
    pod = api.store.get("pods", "ml", "train-0")
    assert event["reason"] == "StewardWarning" and event["type"] == "Warning"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "train-0", "namespace": "ml",
                                       "uid": pod["metadata"]["uid"]}
    assert "idle for 1h" in event["message"] and event["source"] == {"component": "gpu-steward"}
    assert pod["metadata"]["annotations"][STOP_AFTER] == (NOW + timedelta(seconds=1800)).isoformat()
    (_, _, _), = api.calls("PATCH", "/pods/train-0")
    # A warning whose stop waits for the job's long-tail grace states that later deadline, as its text does.
    later = NOW + timedelta(hours=3)
    notifier.notify("alice", "s", "b", job_id="ml/train-0", deadline=later)
    assert api.store.get("pods", "ml", "train-0")["metadata"]["annotations"][STOP_AFTER] == later.isoformat()
    assert notifier.notify("alice", "s", "b", job_id="ml/gone").status == "error"
    assert notifier.notify("ops", "s", "b").status == "suppressed"


def test_watch_streams_added_events(api, settings):
    from kubernetes import client, config, watch

    core = client.CoreV1Api(config.new_client_from_config(config_file=str(settings.kubeconfig)))
    events = list(watch.Watch().stream(core.list_namespaced_pod, "ml", timeout_seconds=1))
    assert {e["type"] for e in events} == {"ADDED"}
    assert {e["object"].metadata.name for e in events} >= {"train-0", "queued"}


def test_a_missing_kubeconfig_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="STEWARD_KUBECONFIG .* does not exist"):
        kubernetes_scheduler_from_settings(Settings(kubeconfig=tmp_path / "nope", data_dir=tmp_path))


def test_fake_api_answers_errors_as_status_objects(api):
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{api.url}/api/v1/namespaces/ml/pods/nope")
    status = json.loads(err.value.read())
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 404, "NotFound")


def test_in_cluster_the_service_account_is_used(monkeypatch, tmp_path):
    from kubernetes.config import incluster_config

    token, cert = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    cert.write_text("-----BEGIN CERTIFICATE-----\nnot checked until a TLS connection\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(cert))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    k8s = kubernetes_scheduler_from_settings(Settings(kubeconfig=None, data_dir=tmp_path))
    cfg = k8s.core.api_client.configuration
    assert cfg.host == "https://10.96.0.1:443" and cfg.ssl_ca_cert == str(cert)
    assert cfg.api_key["BearerToken"] == "bearer sa-token" and cfg.refresh_api_key_hook is not None  # rotated tokens


def _elastic_owned(pod: dict, uid: str = "uid-sft") -> dict:
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "elastic.iml.github.io/v1alpha1", "kind": "ElasticJob",
                                           "name": "sft", "uid": uid, "blockOwnerDeletion": True}]
    return pod


def test_an_owner_grouped_jobs_pod_without_gpus_is_listed_with_it(api, settings):
    """A gang grouped by its controller (a DLRover ElasticJob) has its pods without GPUs listed too, as one grouped
    by a label does: whether its launcher works decides whether the GPU workers wait (review, eleventh round)."""
    labels = {"elasticjob.dlrover/name": "sft"}
    api.store.put("pods", _elastic_owned(gpu_pod("llm", "sft-edljob-worker-0", 8, labels=labels)))
    api.store.put("pods", _elastic_owned(gpu_pod("llm", "sft-edljob-launcher", 0, labels=labels)))
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    jobs = {j.id: j for j in k8s.list_jobs()}
    assert "llm/sft-edljob-worker-0" in jobs
    assert "llm/sft-edljob-launcher" in jobs, sorted(jobs)
