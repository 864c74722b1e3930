"""The real kubectl binary against the fake API: it answers discovery, lists, logs and scale like a real server."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import require_binary
from tests.k8s_fake_api import FakeKubernetesApi
from tests.k8s_fake_cluster import batch_job, capi_pool, gpu_node, gpu_pod, kubeconfig, notebook_owner
from tools.k8s_owners import NOTEBOOK_STOPPED, resume_command

pytestmark = pytest.mark.integration
NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory):
    binary = require_binary("kubectl")
    home = tmp_path_factory.mktemp("kubectl")
    api = FakeKubernetesApi().start()
    s = api.store
    s.now = lambda: NOW  # a fixed server clock: `--since` is measured against it, however long the suite runs
    s.put("nodes", gpu_node("gpu-0", 8, pool="a100"))
    s.put("pods", gpu_pod("ml", "train-0", 4, labels={"team": "llm"}))
    s.put("pods", gpu_pod("ml", "queued", 2, phase="Pending"))
    s.put("pods", gpu_pod("web", "api", 0, labels={"team": "web"}))
    s.logs[("ml", "train-0")] = [(NOW - timedelta(minutes=5), "step 1 loss=2.0"), (NOW - timedelta(seconds=5),
                                                                                  "step 2 loss=1.5")]
    capi_pool(s, "capi", "a100-md", 2, 8, start=NOW - timedelta(hours=1))
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(kubeconfig(api, home))}

    def run(*args: str) -> str:
        done = subprocess.run([binary, *args, "--cache-dir", str(home / "cache")], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done.stdout

    run.api = api  # type: ignore[attr-defined]
    yield run
    api.stop()


def test_get_pods_all_namespaces_as_json(kubectl):
    listed = json.loads(kubectl("get", "pods", "-A", "-o", "json"))
    assert {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in listed["items"]} == {
        ("ml", "train-0"), ("ml", "queued"), ("web", "api")}
    limits = next(p for p in listed["items"] if p["metadata"]["name"] == "train-0")["spec"]["containers"][0]
    assert limits["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_selectors_reach_the_server(kubectl):
    by_label = json.loads(kubectl("get", "pods", "-A", "-l", "team=llm", "-o", "json"))
    assert [p["metadata"]["name"] for p in by_label["items"]] == ["train-0"]
    running = json.loads(kubectl("get", "pods", "-n", "ml", "--field-selector", "status.phase=Pending", "-o", "json"))
    assert [p["metadata"]["name"] for p in running["items"]] == ["queued"]


def test_logs_and_nodes(kubectl):
    assert kubectl("logs", "-n", "ml", "train-0").splitlines() == ["step 1 loss=2.0", "step 2 loss=1.5"]
    assert kubectl("logs", "-n", "ml", "train-0", "--since=1m").splitlines() == ["step 2 loss=1.5"]
    assert "gpu-0" in kubectl("get", "nodes")
    assert "v1.30.0-fake" in kubectl("version")  # the server half of the answer


def test_annotate_and_scale_a_machine_deployment(kubectl):
    kubectl("annotate", "pod", "-n", "ml", "train-0", "steward.io/stop-after=2026-11-02T12:30:00+00:00")
    pod = json.loads(kubectl("get", "pod", "-n", "ml", "train-0", "-o", "json"))
    assert pod["metadata"]["annotations"]["steward.io/stop-after"] == "2026-11-02T12:30:00+00:00"
    kubectl("scale", "machinedeployment", "-n", "capi", "a100-md", "--replicas=1")
    md = json.loads(kubectl("get", "machinedeployments.cluster.x-k8s.io", "-n", "capi", "a100-md", "-o", "json"))
    assert md["spec"]["replicas"] == 1
    assert len(kubectl.api.store.list("machines", "capi")) == 1


def test_the_resume_commands_an_owner_is_given_work_as_given(kubectl):
    """A stop through the pod's owner tells the owner how to undo it (tools/k8s_owners.resume_command, in the stop
    result and the warning): run as written, kubectl resumes the Job and the Kubeflow notebook (a merge patch: a CRD
    takes no strategic merge patch, and the fake answers 415 as the API server does)."""
    store = kubectl.api.store
    store.put("jobs", batch_job("ml", "sft", suspend=True))
    notebook_owner(store, "kf", "lab")
    store.patch("notebooks", "kf", "lab", {"metadata": {"annotations": {NOTEBOOK_STOPPED: "2026-11-02T03:00:00Z"}}},
                "application/merge-patch+json")
    for kind, name, ns in (("Job", "sft", "ml"), ("Notebook", "lab", "kf")):
        command = shlex.split(resume_command(kind, name, ns))
        assert command[0] == "kubectl"
        kubectl(*command[1:])
    assert store.get("jobs", "ml", "sft")["spec"]["suspend"] is False
    assert NOTEBOOK_STOPPED not in (store.get("notebooks", "kf", "lab")["metadata"].get("annotations") or {})
