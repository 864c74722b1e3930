"""Builders for the fake API's objects: GPU pods and nodes, PDBs, CAPI pools, and a cluster mirrored from a SimCluster."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from tests.k8s_fake_api import FakeKubernetesApi
from tests.k8s_fake_store import FakeStore, rfc3339


def gpu_pod(ns: str, name: str, gpus: int, *, node: str | None = "gpu-0", phase: str = "Running",
            labels: dict | None = None, annotations: dict | None = None, owner: tuple[str, str] | None = None,
            started: datetime | None = None) -> dict:
    meta: dict = {"name": name, "namespace": ns, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1" if owner[0] == "Job" else "apps/v1", "kind": owner[0],
                                    "name": owner[1], "uid": f"uid-{owner[1]}", "controller": True}]
    spec: dict = {"containers": [{"name": "main", "image": "trainer:1",
                                  "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}],
                  "terminationGracePeriodSeconds": 30}
    if node and phase != "Pending":
        spec["nodeName"] = node
    status: dict = {"phase": phase}
    if started:
        status["startTime"] = rfc3339(started)
    return {"metadata": meta, "spec": spec, "status": status}


def gpu_node(name: str, gpus: int, *, pool: str | None = None, model: str = "NVIDIA-A100-SXM4-80GB") -> dict:
    labels = {"nvidia.com/gpu.product": model, "kubernetes.io/hostname": name}
    if pool:
        labels["steward.io/pool"] = pool
    cap = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"capacity": cap, "allocatable": cap, "conditions": [{"type": "Ready", "status": "True"}]}}


def pdb(ns: str, name: str, match: dict[str, str], allowed: int = 0) -> dict:
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": match}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}


def capi_pool(store: FakeStore, ns: str, name: str, nodes: int, gpus: int, *, annotations: dict | None = None,
              start: datetime) -> list[str]:
    """A MachineDeployment with `nodes` Machines, each with its Node; returns the node names (oldest first)."""
    store.put("machinedeployments", {
        "metadata": {"name": name, "namespace": ns, "annotations": dict(annotations or {})},
        "spec": {"clusterName": "gpu", "replicas": nodes, "selector": {"matchLabels": {
            "cluster.x-k8s.io/deployment-name": name}}},
        "status": {"replicas": nodes}})
    names = []
    for i in range(nodes):
        node = f"{name}-{i}"
        store.put("machines", {
            "metadata": {"name": f"{name}-m{i}", "namespace": ns, "creationTimestamp": rfc3339(start + timedelta(
                minutes=i)), "labels": {"cluster.x-k8s.io/deployment-name": name}},
            "spec": {"clusterName": "gpu"}, "status": {"nodeRef": {"kind": "Node", "name": node}, "phase": "Running"}})
        store.put("nodes", gpu_node(node, gpus))
        names.append(node)
    return names


def mirror_sim(api: FakeKubernetesApi, cluster) -> None:
    """Pods and nodes for a SimCluster's jobs and nodes, logs read from the simulation, the fake on its clock."""
    store = api.store
    store.now = cluster.now
    for node in cluster.list_nodes():
        store.put("nodes", gpu_node(node.name, node.gpus, pool=node.pool))
    for job in cluster.list_jobs():
        labels = {**job.labels, "steward.io/owner": job.user, "app": job.name}
        pod = gpu_pod(job.namespace, job.name, job.gpus, node=job.node,
                      phase="Pending" if job.state == "pending" else "Running", labels=labels,
                      annotations=job.annotations, owner=("Job", job.name), started=job.started_at)
        store.put("pods", pod)
    start = cluster.scenario.start
    store.log_provider = lambda ns, name: [(line.at, line.text) for line in
                                           cluster.tail(f"{ns}/{name}", start, cluster.now(), limit=100_000)]


def kubeconfig(api: FakeKubernetesApi, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")
