"""Builders for the fake API's objects: GPU pods and nodes, PDBs, CAPI pools, Jobs and Kubeflow notebooks, a cluster
mirrored from a SimCluster; and the controllers' part a test runs itself (the fake API is only the API server)."""

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


def batch_job(ns: str, name: str, *, suspend: bool = False, labels: dict | None = None,
              owner: tuple[str, str, str] | None = None) -> dict:
    """A batch/v1 Job; its uid is `uid-<name>`, the uid gpu_pod's ownerReference names. `owner`: (apiVersion, kind,
    name) of a controller above it (a JobSet)."""
    meta: dict = {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": dict(labels or {})}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": owner[2],
                                    "uid": f"uid-{owner[1].lower()}-{owner[2]}", "controller": True}]
    return {"metadata": meta, "spec": {"suspend": suspend, "backoffLimit": 6, "template": {"spec": {}}},
            "status": {"active": 1}}


def notebook_owner(store: FakeStore, ns: str, name: str, *, version: str = "v1") -> dict:
    """A Kubeflow Notebook as its controller runs it: the Notebook and its StatefulSet (same name, controlled by the
    Notebook, its ownerReference naming the Notebook's `version`). Returns the ownerReference of the notebook's pod
    `<name>-0`, which the StatefulSet controls."""
    nb = store.put("notebooks", {"metadata": {"name": name, "namespace": ns, "annotations": {}},
                                 "spec": {"template": {"spec": {"containers": [{"name": name, "image": "jupyter:1"}]}}}})
    ref = {"apiVersion": f"kubeflow.org/{version}", "kind": "Notebook", "name": name, "uid": nb["metadata"]["uid"],
           "controller": True, "blockOwnerDeletion": True}
    sts = store.put("statefulsets", {"metadata": {"name": name, "namespace": ns, "ownerReferences": [ref]},
                                     "spec": {"replicas": 1, "selector": {"matchLabels": {"statefulset": name}}},
                                     "status": {"replicas": 1, "readyReplicas": 1}})
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": sts["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def kubeflow_notebook(store: FakeStore, ns: str, name: str, gpus: int, *, node: str | None = "gpu-0",
                      version: str = "v1", annotations: dict | None = None) -> dict:
    """A running Kubeflow notebook: Notebook, StatefulSet and the pod `<name>-0` labelled notebook-name, as stored."""
    pod = gpu_pod(ns, f"{name}-0", gpus, node=node, labels={"statefulset": name, "notebook-name": name},
                  annotations=annotations)
    pod["metadata"]["ownerReferences"] = [notebook_owner(store, ns, name, version=version)]
    return store.put("pods", pod)


def _owned_by(pod: dict, uid: str) -> bool:
    return any(r.get("uid") == uid and r.get("controller") for r in pod["metadata"].get("ownerReferences") or [])


def run_job_controller(store: FakeStore) -> list[str]:
    """The Job controller's part on a suspended Job (Kubernetes >= 1.24): its active pods are deleted with their
    own grace period; the Job stays. Returns the pods it deleted."""
    deleted = []
    for job in store.list("jobs"):
        if not (job.get("spec") or {}).get("suspend"):
            continue
        for pod in store.list("pods", job["metadata"]["namespace"]):
            if _owned_by(pod, job["metadata"]["uid"]) and "deletionTimestamp" not in pod["metadata"]:
                store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
                deleted.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
    return deleted


def run_notebook_controller(store: FakeStore) -> list[str]:
    """Kubeflow's notebook controller: a Notebook annotated kubeflow-resource-stopped gets its StatefulSet scaled to 0
    (whose controller then deletes the pod with its grace period); an unannotated one back to 1 (the pod returns
    under the same name, with a new uid). Returns the pods deleted."""
    deleted = []
    for nb in store.list("notebooks"):
        ns, name = nb["metadata"]["namespace"], nb["metadata"]["name"]
        stopped = "kubeflow-resource-stopped" in (nb["metadata"].get("annotations") or {})
        sts = store.objects["statefulsets"].get((ns, name))
        if sts is None or not _owned_by(sts, nb["metadata"]["uid"]):
            continue
        store.patch("statefulsets", ns, name, {"spec": {"replicas": 0 if stopped else 1}},
                    "application/merge-patch+json")
        pod = store.objects["pods"].get((ns, f"{name}-0"))
        if stopped and pod is not None and "deletionTimestamp" not in pod["metadata"]:
            store.delete("pods", ns, f"{name}-0")
            deleted.append(f"{ns}/{name}-0")
    return deleted


def _ref(obj: dict, controller: bool = True) -> dict:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": controller, "blockOwnerDeletion": True}


def _owned_pod(store: FakeStore, owner: dict, ns: str, name: str, gpus: int, labels: dict, node: str | None) -> dict:
    pod = gpu_pod(ns, name, gpus, node=node, labels=labels)
    pod["metadata"]["ownerReferences"] = [_ref(owner)]
    return store.put("pods", pod)


def training_job(store: FakeStore, ns: str, name: str, *, kind: str = "PyTorchJob", replicas: int = 1, gpus: int = 8,
                 labels: dict | None = None, node: str | None = "gpu-0") -> list[dict]:
    """A Kubeflow training job (kubeflow.org/v1) running `replicas` worker pods `<name>-worker-<i>`, each controlled by
    the job and labelled as the training operator labels them. Returns the pods as stored."""
    job = store.put(f"{kind.lower()}s", {
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels or {})},
        "spec": {"runPolicy": {"cleanPodPolicy": "None", "suspend": False},
                 f"{kind.removesuffix('Job').lower()}ReplicaSpecs": {"Worker": {"replicas": replicas}}},
        "status": {"conditions": [{"type": "Running", "status": "True"}]}})
    return [_owned_pod(store, job, ns, f"{name}-worker-{i}", gpus, {
        "training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(i), "training.kubeflow.org/operator-name": "pytorchjob-controller"},
        node) for i in range(replicas)]


def jobset(store: FakeStore, ns: str, name: str, *, jobs: int = 1, gpus: int = 8, labels: dict | None = None,
           node: str | None = "gpu-0") -> list[dict]:
    """A JobSet (jobset.x-k8s.io/v1alpha2) with `jobs` child Jobs `<name>-workers-<i>` (controlled by it, one pod each,
    labelled as the JobSet controller labels them). Returns the pods as stored."""
    js = store.put("jobsets", {"metadata": {"name": name, "namespace": ns, "labels": dict(labels or {})},
                               "spec": {"suspend": False, "replicatedJobs": [{"name": "workers", "replicas": jobs}]}})
    pods = []
    for i in range(jobs):
        child = f"{name}-workers-{i}"
        job = store.put("jobs", {"metadata": {"name": child, "namespace": ns, "ownerReferences": [_ref(js)],
                                              "labels": {"jobset.sigs.k8s.io/jobset-name": name}},
                                 "spec": {"suspend": False, "template": {"spec": {}}}, "status": {"active": 1}})
        pods.append(_owned_pod(store, job, ns, f"{child}-0", gpus, {
            "jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "batch.kubernetes.io/job-name": child, "job-name": child}, node))
    return pods


def ray_cluster(store: FakeStore, ns: str, name: str, *, gpu_workers: int = 1, gpus: int = 8,
                owner: dict | None = None, node: str | None = "gpu-0") -> list[dict]:
    """A RayCluster (ray.io/v1), controlled by `owner` (a RayJob) if given: a head pod without GPUs and `gpu_workers`
    GPU worker pods, controlled by the cluster and labelled ray.io/cluster. Returns the pods as stored (head first)."""
    meta: dict = {"name": name, "namespace": ns}
    if owner is not None:
        meta["ownerReferences"] = [_ref(owner)]
    cluster = store.put("rayclusters", {"metadata": meta, "spec": {"headGroupSpec": {}, "workerGroupSpecs": [
        {"groupName": "gpu", "replicas": gpu_workers}]}})
    pods = [_owned_pod(store, cluster, ns, f"{name}-head", 0, {"ray.io/cluster": name, "ray.io/node-type": "head"},
                       node)]
    pods += [_owned_pod(store, cluster, ns, f"{name}-gpu-worker-{i}", gpus, {
        "ray.io/cluster": name, "ray.io/node-type": "worker", "ray.io/group": "gpu"}, node)
        for i in range(gpu_workers)]
    return pods


def ray_job(store: FakeStore, ns: str, name: str, *, gpu_workers: int = 1, gpus: int = 8, shutdown: bool = True,
            labels: dict | None = None, node: str | None = "gpu-0") -> list[dict]:
    """A RayJob (ray.io/v1) with the RayCluster it created, `<name>-raycluster`; returns the cluster's pods."""
    rj = store.put("rayjobs", {"metadata": {"name": name, "namespace": ns, "labels": dict(labels or {})},
                               "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": shutdown,
                                        "suspend": False, "rayClusterSpec": {}},
                               "status": {"jobDeploymentStatus": "Running"}})
    return ray_cluster(store, ns, f"{name}-raycluster", gpu_workers=gpu_workers, gpus=gpus, owner=rj, node=node)


def _delete_owned(store: FakeStore, uid: str) -> list[str]:
    deleted = []
    for pod in store.list("pods"):
        if _owned_by(pod, uid) and "deletionTimestamp" not in pod["metadata"]:
            store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
            deleted.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
    return deleted


def run_training_operator(store: FakeStore) -> list[str]:
    """The training operator's part on a job with spec.runPolicy.suspend (v1.7+): its pods (and services) are deleted
    with their grace period, the job is kept with a Suspended condition. Returns the pods deleted."""
    deleted = []
    for kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob"):
        for job in store.list(f"{kind.lower()}s"):
            if ((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"):
                deleted += _delete_owned(store, job["metadata"]["uid"])
    return deleted


def run_jobset_controller(store: FakeStore) -> list[str]:
    """The JobSet controller's part on a suspended JobSet: its child Jobs are suspended (the Job controller then deletes
    their pods: run_job_controller). Returns the Jobs it suspended."""
    suspended = []
    for js in store.list("jobsets"):
        if not (js.get("spec") or {}).get("suspend"):
            continue
        for job in store.list("jobs", js["metadata"]["namespace"]):
            if _owned_by(job, js["metadata"]["uid"]) and not job["spec"].get("suspend"):
                store.patch("jobs", job["metadata"]["namespace"], job["metadata"]["name"], {"spec": {"suspend": True}},
                            "application/merge-patch+json")
                suspended.append(f"{job['metadata']['namespace']}/{job['metadata']['name']}")
    return suspended


def run_kuberay(store: FakeStore) -> list[str]:
    """KubeRay's part on a suspended RayJob: its RayCluster is deleted (and with it, by the garbage collector, the
    cluster's pods, with their grace period). Returns the pods deleted."""
    deleted = []
    for rj in store.list("rayjobs"):
        if not (rj.get("spec") or {}).get("suspend"):
            continue
        for cluster in store.list("rayclusters", rj["metadata"]["namespace"]):
            if _owned_by(cluster, rj["metadata"]["uid"]):
                deleted += _delete_owned(store, cluster["metadata"]["uid"])
                store.delete("rayclusters", cluster["metadata"]["namespace"], cluster["metadata"]["name"])
    return deleted


def pod_asking(ns: str, name: str, requests: dict[str, str], *, node: str | None = "gpu-0", kind: str = "limits",
               **kw) -> dict:
    """A running pod whose one container asks for `requests` (as limits, or requests): e.g. a CPU pod
    ({"cpu": "32"}) or one on a MIG slice ({"nvidia.com/mig-3g.40gb": "1"})."""
    pod = gpu_pod(ns, name, 0, node=node, **kw)
    pod["spec"]["containers"][0]["resources"] = {kind: dict(requests)}
    return pod


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
        # Owned as the simulation says (sim/cluster.py): a Job's pod by its Job (which exists, as on a cluster), a
        # Deployment's by its ReplicaSet, any other by nothing (a bare pod).
        # A job labelled notebook-name is a Kubeflow notebook's pod (named <notebook>-0).
        owner = None
        if job.owner_kind == "Job":
            owner = ("Job", job.labels["job-name"])
            store.put("jobs", batch_job(job.namespace, owner[1], labels={"job-name": owner[1]}))
        elif job.owner_kind == "Deployment":
            owner = ("ReplicaSet", f"{job.name}-{job.labels['pod-template-hash']}")
        pod = gpu_pod(job.namespace, job.name, job.gpus, node=job.node,
                      phase="Pending" if job.state == "pending" else "Running", labels=labels,
                      annotations=job.annotations, owner=owner, started=job.started_at)
        if "notebook-name" in job.labels:
            pod["metadata"]["ownerReferences"] = [notebook_owner(store, job.namespace, job.labels["notebook-name"])]
        store.put("pods", pod)
    start = cluster.scenario.start
    store.log_provider = lambda ns, name: [(line.at, line.text) for line in
                                           cluster.tail(f"{ns}/{name}", start, cluster.now(), limit=100_000)]


def kubeconfig(api: FakeKubernetesApi, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")
