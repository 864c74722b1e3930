"""deploy/kubernetes/rbac.yaml: least privilege per level, and it covers every call the adapters make."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from agent.settings import Settings
from tests.k8s_fake_api import _PATH, FakeKubernetesApi
from tests.k8s_fake_cluster import capi_pool, gpu_pod, kubeconfig
from tools.capi import capi_pools_from_settings
from tools.k8s_notify import kubernetes_notifier_from_settings
from tools.kubernetes import kubernetes_scheduler_from_settings

RBAC = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes" / "rbac.yaml"
_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def _docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


def _grants(role: dict) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def _roles() -> dict[str, set[tuple[str, str, str]]]:
    return {d["metadata"]["name"]: _grants(d) for d in _docs() if d["kind"] == "ClusterRole"}


def test_the_base_role_cannot_delete_pods_or_touch_pools():
    base = _roles()["gpu-steward"]
    assert not [g for g in base if g[2] in ("delete", "deletecollection", "*")]
    assert ("", "pods/eviction", "create") in base and ("", "pods/log", "get") in base
    assert not [g for g in base if g[0] == "cluster.x-k8s.io" or "*" in g]


def test_force_and_pool_roles_are_separate_and_narrow():
    roles = _roles()
    assert roles["gpu-steward-force-reclaim"] == {("", "pods", "delete")}
    pools = roles["gpu-steward-node-pools"]
    assert {g[0] for g in pools} == {"cluster.x-k8s.io"} and not [g for g in pools if g[2] == "delete"]
    bound = {d["roleRef"]["name"] for d in _docs() if d["kind"] == "ClusterRoleBinding"}
    assert bound == set(roles)
    accounts = {(s["name"], s["namespace"]) for d in _docs() if d["kind"] == "ClusterRoleBinding"
                for s in d["subjects"]}
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
    yield server
    server.stop()


def test_the_roles_cover_every_call_the_adapters_make(api, tmp_path):
    settings = Settings(kubeconfig=kubeconfig(api, tmp_path), data_dir=tmp_path)
    k8s = kubernetes_scheduler_from_settings(settings)
    notifier = kubernetes_notifier_from_settings(settings, notice_s=1800)
    pools = capi_pools_from_settings(settings, k8s)
    roles = _roles()

    k8s.list_jobs(), k8s.list_nodes(), k8s.get_job("ml/a")
    k8s.tail("ml/a", datetime(2026, 11, 2, tzinfo=UTC), datetime.now(UTC))
    notifier.notify("alice", "s", "b", job_id="ml/a")
    k8s.stop_job("ml/a", force=False, grace_s=30, reason="idle")
    assert _needed(api.requests) <= roles["gpu-steward"]

    api.requests.clear()
    k8s.stop_job("ml/b", force=True, grace_s=30, reason="zombie")
    assert _needed(api.requests) <= roles["gpu-steward"] | roles["gpu-steward-force-reclaim"]

    api.requests.clear()
    pools.list_pools()
    assert pools.resize_pool("a100-md", 2, reason="empty").status == "resized"
    assert _needed(api.requests) <= roles["gpu-steward"] | roles["gpu-steward-node-pools"]
