"""deploy/kubernetes RBAC (base/rbac.yaml, components/*/rbac-level*.yaml): least privilege per level, opt-in
levels in their own files, and together they cover every call the adapters make."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from agent.config.settings import Settings
from tests.k8s_fake_api import _PATH, FakeKubernetesApi
from tests.k8s_fake_cluster import (
    batch_job,
    capi_pool,
    gpu_pod,
    jobset,
    kubeconfig,
    kubeflow_notebook,
    ray_job,
    training_job,
)
from tools.capi import capi_pools_from_settings
from tools.k8s_notify import kubernetes_notifier_from_settings
from tools.kubernetes import kubernetes_scheduler_from_settings

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
RBAC = DEPLOY / "base" / "rbac.yaml"  # in the Kustomize base: levels 0-2
LEVEL3 = DEPLOY / "components" / "force-stop" / "rbac-level3-force-stop.yaml"  # opt-in component: delete pods
LEVEL4 = DEPLOY / "components" / "pools" / "rbac-level4-pools.yaml"  # opt-in component: resize node pools
_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
_WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}
POOL_GROUPS = {"cluster.x-k8s.io", "*"}


def _docs(path: Path = RBAC) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _grants(role: dict) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def _roles(path: Path = RBAC) -> dict[str, set[tuple[str, str, str]]]:
    return {d["metadata"]["name"]: _grants(d) for d in _docs(path) if d["kind"] in ("ClusterRole", "Role")}


def _bound(path: Path) -> set[str]:
    return {d["roleRef"]["name"] for d in _docs(path) if d["kind"] in ("ClusterRoleBinding", "RoleBinding")}


def _all_roles() -> dict[str, set[tuple[str, str, str]]]:
    return {**_roles(RBAC), **_roles(LEVEL3), **_roles(LEVEL4)}


def test_the_default_file_grants_no_pod_delete_and_no_pool_write():
    """rbac.yaml is what the README applies: every grant in it, bound or not, stays at levels 0-2."""
    grants = set().union(*_roles(RBAC).values())
    assert not [g for g in grants if g[1] in ("pods", "*") and g[2] in ("delete", "deletecollection", "*")]
    assert not [g for g in grants if g[0] in POOL_GROUPS or g[1].startswith(("machinedeployments", "machines"))]
    assert not [g for g in grants if "*" in g]
    assert ("", "pods/eviction", "create") in grants and ("", "pods/log", "get") in grants
    assert _bound(RBAC) == set(_roles(RBAC)) == {"gpu-steward"}
    # A stop through the pod's owner (tools/k8s_owners.py) reads and patches exactly that owner: no delete, no
    # update (a patch of one field), nothing on other kinds of those groups.
    owners = {g for g in grants if g[0] in ("batch", "apps", "kubeflow.org", "jobset.x-k8s.io", "ray.io")}
    suspended = ("pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs", "notebooks")
    assert owners == {("batch", "jobs", "get"), ("batch", "jobs", "patch"), ("apps", "statefulsets", "get"),
                      *(("kubeflow.org", r, v) for r in suspended for v in ("get", "patch")),
                      ("jobset.x-k8s.io", "jobsets", "get"), ("jobset.x-k8s.io", "jobsets", "patch"),
                      ("ray.io", "rayclusters", "get"), ("ray.io", "rayjobs", "get"), ("ray.io", "rayjobs", "patch")}


def test_level_3_and_level_4_are_opt_in_files_that_grant_them():
    level3, level4 = _roles(LEVEL3), _roles(LEVEL4)
    assert level3 == {"gpu-steward-force-reclaim": {("", "pods", "delete")}}
    assert set(level4) == {"gpu-steward-node-pools"}
    pools = level4["gpu-steward-node-pools"]
    assert {g[0] for g in pools} == {"cluster.x-k8s.io"} and not [g for g in pools if g[2] in ("delete", "*")]
    assert ("cluster.x-k8s.io", "machinedeployments/scale", "patch") in pools
    assert ("cluster.x-k8s.io", "machines", "patch") in pools
    # Each opt-in file binds its own role, and only that.
    assert _bound(LEVEL3) == set(level3) and _bound(LEVEL4) == set(level4)
    for path in (LEVEL3, LEVEL4):
        assert not [d for d in _docs(path) if d["kind"] in ("Namespace", "ServiceAccount")]  # rbac.yaml owns those
    accounts = {(s["name"], s["namespace"]) for path in (RBAC, LEVEL3, LEVEL4) for d in _docs(path)
                if d["kind"] == "ClusterRoleBinding" for s in d["subjects"]}
    assert accounts == {("gpu-steward", "gpu-steward")}


def _needed(requests) -> set[tuple[str, str, str]]:
    out = set()
    for method, path, query in requests:
        m = _PATH.match(path)
        assert m, path
        resource = m["plural"] + (f"/{m['sub']}" if m["sub"] else "")
        verb = _VERBS.get(method) or ("get" if m["name"] else "watch" if query.get("watch") else "list")
        out.add((m["group"] or "", resource, verb))
    return out


@pytest.fixture
def api():
    server = FakeKubernetesApi().start()
    nodes = capi_pool(server.store, "capi", "a100-md", 3, 8, start=datetime(2026, 11, 2, tzinfo=UTC))
    server.store.put("pods", gpu_pod("ml", "a", 2, node=nodes[0]))
    server.store.put("pods", gpu_pod("ml", "b", 2, node=nodes[1]))
    for job in ("c", "d"):  # pods whose Job (and Kubeflow Notebook) a stop acts on
        server.store.put("jobs", batch_job("ml", job))
        server.store.put("pods", gpu_pod("ml", f"{job}-0", 1, node=nodes[2], owner=("Job", job)))
        kubeflow_notebook(server.store, "kf", f"nb-{job}", 1, node=nodes[2])
        training_job(server.store, "ml", f"ft-{job}", gpus=1, node=nodes[2])  # ... a training job, JobSet, RayJob
        jobset(server.store, "ml", f"js-{job}", gpus=1, node=nodes[2])
        ray_job(server.store, "ml", f"rj-{job}", gpus=1, node=nodes[2])
    yield server
    server.stop()


def test_the_roles_cover_every_call_the_adapters_make(api, tmp_path):
    settings = Settings(kubeconfig=kubeconfig(api, tmp_path), data_dir=tmp_path)
    k8s = kubernetes_scheduler_from_settings(settings)
    notifier = kubernetes_notifier_from_settings(settings, notice_s=1800)
    pools = capi_pools_from_settings(settings, k8s)
    roles = _all_roles()

    k8s.list_jobs(), k8s.list_nodes(), k8s.get_job("ml/a")
    k8s.tail("ml/a", datetime(2026, 11, 2, tzinfo=UTC), datetime.now(UTC))
    notifier.notify("alice", "s", "b", job_id="ml/a")
    assert k8s.stop_job("ml/a", force=False, grace_s=30, reason="idle").status == "stopping"
    assert k8s.stop_job("ml/c-0", force=False, grace_s=30, reason="idle").status == "stopping"
    assert k8s.stop_job("kf/nb-c-0", force=False, grace_s=30, reason="idle").status == "stopping"
    owned = ("ml/ft-c-worker-0", "ml/js-c-workers-0-0", "ml/rj-c-raycluster-gpu-worker-0")
    for job in owned:
        assert k8s.stop_job(job, force=False, grace_s=30, reason="idle").status == "stopping"
        notes = [k8s.stop_note(j, "en") for j in k8s.list_jobs() if j.id == job]
        assert notes and notes[0].startswith("How: the steward suspends")
    needed = _needed(api.requests)
    assert {("batch", "jobs", "patch"), ("kubeflow.org", "notebooks", "patch"), ("apps", "statefulsets", "get"),
            ("kubeflow.org", "pytorchjobs", "patch"), ("jobset.x-k8s.io", "jobsets", "patch"),
            ("ray.io", "rayclusters", "get"), ("ray.io", "rayjobs", "patch")} <= needed
    assert needed <= roles["gpu-steward"]

    for job in ("ml/d-0", "kf/nb-d-0", "ml/ft-d-worker-0", "ml/js-d-workers-0-0", "ml/rj-d-raycluster-gpu-worker-0"):  # a forced stop follows the graceful one, its pod still terminating
        assert k8s.stop_job(job, force=False, grace_s=30, reason="idle").status == "stopping"
        ns, name = job.split("/")
        api.store.delete("pods", ns, name, grace_s=3600)  # its controller deleted it: terminating
    api.requests.clear()
    for job in ("ml/b", "ml/d-0", "kf/nb-d-0", "ml/ft-d-worker-0", "ml/js-d-workers-0-0",
                "ml/rj-d-raycluster-gpu-worker-0"):
        assert k8s.stop_job(job, force=True, grace_s=30, reason="zombie").status == "stopped"
    assert _needed(api.requests) <= roles["gpu-steward"] | roles["gpu-steward-force-reclaim"]

    api.requests.clear()
    pools.list_pools()
    assert pools.resize_pool("a100-md", 2, reason="empty").status == "resized"
    assert _needed(api.requests) <= roles["gpu-steward"] | roles["gpu-steward-node-pools"]
