"""ClusterApiPools against the fake API: pools from MachineDeployments, scale-downs that remove only empty nodes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.config.settings import Settings
from tests.k8s_fake_api import FakeKubernetesApi
from tests.k8s_fake_cluster import capi_pool, gpu_pod, kubeconfig, pod_asking
from tools.capi import DELETE_MACHINE, MIN_SIZE, PRICE, STEWARD_MARK, CapiPoolConfig, capi_pools_from_settings
from tools.kubernetes import kubernetes_scheduler_from_settings
from tools.protocols import NodePools

START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


@pytest.fixture
def api():
    server = FakeKubernetesApi().start()
    s = server.store
    nodes = capi_pool(s, "capi", "a100-md", 4, 8, start=START,
                      annotations={MIN_SIZE: "1", PRICE: "3.5", "steward.io/billing": "on-demand"})
    capi_pool(s, "capi", "h100-md", 2, 8, start=START)
    s.put("pods", gpu_pod("ml", "train", 8, node=nodes[1]))
    s.put("pods", gpu_pod("ml", "tiny", 1, node=nodes[3]))
    server.nodes = nodes  # type: ignore[attr-defined]
    yield server
    server.stop()


def _pools(api, tmp_path, config=None):
    settings = Settings(kubeconfig=kubeconfig(api, tmp_path), data_dir=tmp_path)
    k8s = kubernetes_scheduler_from_settings(settings)
    return capi_pools_from_settings(settings, k8s, config), k8s


def test_machine_deployments_read_as_pools(api, tmp_path):
    pools, k8s = _pools(api, tmp_path, CapiPoolConfig(prices={"h100-md": 6.0}, min_nodes={"h100-md": 2}))
    assert isinstance(pools, NodePools)
    k8s.list_jobs()
    by_name = {p.name: p for p in pools.list_pools()}
    a100, h100 = by_name["a100-md"], by_name["h100-md"]
    assert (a100.provider, a100.nodes, a100.gpus_per_node, a100.min_nodes, a100.busy_nodes) == ("capi", 4, 8, 1, 2)
    assert a100.price_per_gpu_hour == 3.5 and h100.price_per_gpu_hour == 6.0
    assert (h100.min_nodes, h100.busy_nodes) == (2, 0)
    assert pools.api_calls == 2 and k8s.api_calls == 2  # MDs + machines; the sweep's pod list + nodes


def test_scale_down_removes_exactly_the_empty_nodes(api, tmp_path):
    pools, _ = _pools(api, tmp_path)
    result = pools.resize_pool("a100-md", 2, reason="empty overnight")
    assert result.status == "resized" and (result.nodes_before, result.nodes_after) == (4, 2)
    nodes = api.nodes
    assert sorted(result.removed_nodes) == sorted([nodes[0], nodes[2]])
    marked = [m["metadata"]["name"] for m in api.store.list("machines", "capi")
              if DELETE_MACHINE in (m["metadata"].get("annotations") or {})]
    assert marked == []  # the marked machines are the ones the controller removed
    left = {n["metadata"]["name"] for n in api.store.list("nodes")}
    assert {nodes[1], nodes[3]} <= left and not {nodes[0], nodes[2]} & left
    (_, path, _), = api.calls("PATCH", "/scale")
    assert path == "/apis/cluster.x-k8s.io/v1beta1/namespaces/capi/machinedeployments/a100-md/scale"
    assert api.store.get("machinedeployments", "capi", "a100-md")["spec"]["replicas"] == 2


def test_refuses_to_remove_a_busy_node_or_go_below_the_minimum(api, tmp_path):
    pools, _ = _pools(api, tmp_path)
    busy = pools.resize_pool("a100-md", 1, reason="x")
    assert busy.status == "refused" and "only 2 of 4 machines run no job" in busy.detail
    assert pools.resize_pool("a100-md", 0, reason="x").status == "refused"
    assert not api.calls("PATCH")
    assert pools.resize_pool("a100-md", 4, reason="x").status == "unchanged"
    assert pools.resize_pool("nope", 1, reason="x").status == "error"


def test_a_job_that_lands_meanwhile_stops_the_scale_down(api, tmp_path):
    pools, k8s = _pools(api, tmp_path)
    real = k8s.workloads_by_node
    seen = []

    def racing():
        seen.append(1)
        if len(seen) == 2:  # after the marks: a pod was scheduled onto a chosen node
            api.store.put("pods", gpu_pod("ml", "late", 1, node=api.nodes[2]))
        return real()

    k8s.workloads_by_node = racing
    result = pools.resize_pool("a100-md", 2, reason="x")
    assert result.status == "refused" and api.nodes[2] in result.detail
    assert not api.calls("PATCH", "/scale")
    assert all(DELETE_MACHINE not in (m["metadata"].get("annotations") or {}) for m in api.store.list("machines"))
    assert len(api.store.list("nodes")) == 6


def test_growing_respects_the_maximum(api, tmp_path):
    api.store.patch("machinedeployments", "capi", "h100-md", {"metadata": {"annotations": {
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "3"}}}, "merge")
    pools, _ = _pools(api, tmp_path)
    assert pools.resize_pool("h100-md", 4, reason="x").status == "refused"
    assert pools.resize_pool("h100-md", 3, reason="x").status == "resized"
    assert api.store.get("machinedeployments", "capi", "h100-md")["spec"]["replicas"] == 3


def _cpu_pod(ns: str, name: str, node: str) -> dict:
    return pod_asking(ns, name, {"cpu": "32", "memory": "200Gi"}, node=node, kind="requests")


def _mig_pod(ns: str, name: str, node: str) -> dict:
    return pod_asking(ns, name, {"nvidia.com/mig-3g.40gb": "1"}, node=node)


@pytest.mark.parametrize("make", [_cpu_pod, _mig_pod], ids=["cpu-pod", "mig-pod"])
def test_a_node_running_any_workload_is_not_removed(api, tmp_path, make):
    """A pod asking for no nvidia.com/gpu (a CPU data-prep pod that tolerates the GPU taint, a MIG slice's pod) is
    no GPU job, but removing its node kills it: for a removal, every pod bound to the node counts."""
    api.store.put("pods", make("data", "etl-worker", api.nodes[2]))  # nodes 1 and 3 run GPU pods, 0 and 2 no job
    pools, _ = _pools(api, tmp_path)
    result = pools.resize_pool("a100-md", 3, reason="empty overnight")
    assert result.status == "resized" and result.removed_nodes == [api.nodes[0]]
    assert api.nodes[2] in {n["metadata"]["name"] for n in api.store.list("nodes")}
    assert pools.resize_pool("a100-md", 2, reason="x").status == "refused"  # 1, 2, 3 run work: none can go


def test_daemonset_static_and_finished_pods_leave_a_node_empty(api, tmp_path):
    """What belongs to the node (a DaemonSet's pod, a static pod's mirror) goes with it, and a finished pod holds
    nothing: those do not keep a node."""
    node = api.nodes[2]
    api.store.put("pods", gpu_pod("kube-system", "dcgm-exporter-x1", 0, node=node, owner=("DaemonSet", "dcgm")))
    mirror = gpu_pod("kube-system", f"kube-proxy-{node}", 0, node=node,
                     annotations={"kubernetes.io/config.mirror": "abc123"})
    mirror["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": "uid-node",
                                              "controller": True}]
    api.store.put("pods", mirror)
    api.store.put("pods", gpu_pod("ml", "done", 0, node=node, phase="Succeeded"))
    pools, _ = _pools(api, tmp_path)
    result = pools.resize_pool("a100-md", 2, reason="empty overnight")
    assert result.status == "resized" and sorted(result.removed_nodes) == sorted([api.nodes[0], node])


def test_a_machine_deployment_mid_change_is_not_shrunk(api, tmp_path):
    """spec.replicas says 4 and 3 Machines live (one remediated with its node, its replacement not created yet):
    a scale to 3 removes none, so the mark set on the chosen Machine would stay on a live one, the node be reported
    removed, and the next scale-down by anyone (the autoscaler, a person) remove it first, a job on it by then."""
    s = api.store
    s.objects["machines"].pop(("capi", "a100-md-m0"))
    s.objects["nodes"].pop(("", api.nodes[0]))
    pools, _ = _pools(api, tmp_path)
    result = pools.resize_pool("a100-md", 3, reason="empty overnight")
    assert result.status == "refused" and "mid-change: 3 live machines for spec.replicas 4" in result.detail
    assert not api.calls("PATCH")  # no mark, no scale
    being_deleted = s.objects["machines"][("capi", "a100-md-m3")]["metadata"]
    being_deleted["deletionTimestamp"] = "2026-11-02T08:30:00Z"  # and one more being deleted: 2 live for 4
    assert "2 live machines" in pools.resize_pool("a100-md", 2, reason="x").detail


def test_a_chosen_machine_the_scale_did_not_remove_keeps_no_mark_and_is_not_reported(api, tmp_path):
    """Between the check and the scale a person marks another empty Machine (older: CAPI removes it first). The
    scale removes that one; the steward's chosen Machine stays: its mark is taken back (else the next scale-down by
    anyone would remove it first, busy or not) and only the node that went is reported."""
    pools, k8s = _pools(api, tmp_path)
    real = k8s.workloads_by_node
    seen = []

    def racing():
        seen.append(1)
        if len(seen) == 2:  # the re-check: meanwhile someone marked a100-md-m0
            api.store.patch("machines", "capi", "a100-md-m0", {"metadata": {"annotations": {
                DELETE_MACHINE: "yes"}}}, "application/merge-patch+json")
        return real()

    k8s.workloads_by_node = racing
    result = pools.resize_pool("a100-md", 3, reason="x")
    assert (result.status, result.nodes_after, result.removed_nodes) == ("resized", 3, [api.nodes[0]])
    assert api.nodes[2] in result.detail and "marks taken back" in result.detail
    m2 = api.store.get("machines", "capi", "a100-md-m2")["metadata"].get("annotations") or {}
    assert DELETE_MACHINE not in m2 and STEWARD_MARK not in m2
    assert api.nodes[2] in {n["metadata"]["name"] for n in api.store.list("nodes")}
