"""Pods of one distributed job are judged together: a rank that waits while another works is not waste
(agent/detectors/gang.py). A real hang has no working rank, so its findings stand."""

from __future__ import annotations

from datetime import timedelta

from agent.detectors.engine import run_detectors
from agent.detectors.gang import gang_of
from core.cluster import NodeInfo
from tests.test_detectors import AT, POLICY, io, job, job_gpus, observe, progress

GANG = {"training.kubeflow.org/job-name": "sft"}
SILENT = AT - timedelta(minutes=50)  # a pod whose log stopped 50 minutes ago


def pod(name: str, node: str, labels: dict[str, str] | None = None, namespace: str = "llm"):
    return job(f"{namespace}/{name}", gpus=4, node=node, labels=GANG if labels is None else labels)


def cluster(master_util: float, master_log_at=None, worker_labels: dict[str, str] | None = None,
            worker_ns: str = "llm", master_labels: dict[str, str] | None = None):
    """master-0 at `master_util` (24 slices); worker-0 pinned at 100 % with a log silent since SILENT (hung-looking);
    worker-1 at 0 % (idle-looking). All on their own nodes, no network or disk I/O."""
    jobs = [pod("master-0", "n1", master_labels), pod("worker-0", "n2", worker_labels, worker_ns),
            pod("worker-1", "n3", worker_labels, worker_ns)]
    gpus = (job_gpus("llm/master-0", [master_util] * 24, node="n1")
            + job_gpus(f"{worker_ns}/worker-0", [100.0] * 24, node="n2")
            + job_gpus(f"{worker_ns}/worker-1", [85.0] * 6 + [0.0] * 18, node="n3"))
    ios = [io(j.id, 24) for j in jobs]
    logs = {f"{worker_ns}/worker-0": progress(f"{worker_ns}/worker-0", SILENT),
            "llm/master-0": progress("llm/master-0", master_log_at if master_log_at is not None else SILENT)}
    nodes = [NodeInfo(name=n, pool="a100", gpus=8, jobs=[j.id for j in jobs if j.node == n]) for n in ("n1", "n2", "n3")]
    return observe(jobs, gpus, ios, logs, nodes=nodes)


def kinds(obs) -> dict[str, str]:
    return {f.target: f.kind for f in run_detectors(obs, POLICY) if f.kind in ("idle", "zombie")}


def test_waiting_ranks_are_spared_while_rank_0_works():
    # Rank 0 evaluates at 55 % (between idle and pinned): the pinned and the idle worker wait for it.
    assert kinds(cluster(55.0)) == {}
    # Its log advancing says the same, whatever its GPU shows (a pinned rank 0 that still logs steps).
    assert kinds(cluster(100.0, master_log_at=AT - timedelta(minutes=3))) == {}


def test_a_hung_job_has_no_working_rank_and_its_findings_stand():
    # Every rank pinned (rank 0 too, its log silent): the survivors of a dead rank. Nothing shows work.
    found = kinds(cluster(100.0))
    assert found == {"llm/master-0": "zombie", "llm/worker-0": "zombie", "llm/worker-1": "idle"}


def test_only_pods_of_the_same_job_protect_each_other():
    # Same label value in another namespace, or pods without a gang label: judged alone.
    assert kinds(cluster(55.0, worker_ns="other")) == {"other/worker-0": "zombie", "other/worker-1": "idle"}
    assert kinds(cluster(55.0, worker_labels={})) == {"llm/worker-0": "zombie", "llm/worker-1": "idle"}
    # batch/v1 `job-name` is not a gang: a parallel Job's pods are independent workers.
    assert gang_of(pod("w", "n1", {"job-name": "sft"})) is None
    assert gang_of(pod("w", "n1", {"volcano.sh/job-name": "sft"})) == ("llm", "volcano.sh/job-name", "sft")


def test_an_indexed_jobs_pods_are_one_job():
    # An Indexed Job is how Kubernetes runs multi-pod training without an operator (its docs' "Job with Pod-to-Pod
    # Communication"): its waiting ranks are spared while rank 0 evaluates, as a PyTorchJob's are.
    indexed = {"batch.kubernetes.io/job-name": "sft", "job-name": "sft", "batch.kubernetes.io/job-completion-index": "1"}
    assert gang_of(pod("w", "n1", indexed)) == ("llm", "batch.kubernetes.io/job-name", "sft")
    assert gang_of(pod("w", "n1", {"job-name": "sft", "batch.kubernetes.io/job-completion-index": "0"})) == (
        "llm", "job-name", "sft")
    rank0 = {**indexed, "batch.kubernetes.io/job-completion-index": "0"}
    assert kinds(cluster(55.0, master_labels=rank0, worker_labels=indexed)) == {}


DLROVER = {"app": "dlrover", "elasticjob.dlrover/name": "sft", "elasticjob.dlrover/replica-type": "worker"}


def _owned(name: str, node: str, kind: str = "ElasticJob", owner: str = "sft", uid: str = "uid-sft",
           namespace: str = "llm"):
    return job(f"{namespace}/{name}", gpus=4, node=node, labels=DLROVER, owner_kind=kind, owner_name=owner,
               owner_uid=uid)


def _owned_cluster(master_util: float, kind: str = "ElasticJob", worker_uid: str = "uid-sft"):
    """cluster() with DLRover's own labels (no gang label the steward knows) and each pod owned by `kind` sft."""
    obs = cluster(master_util, master_log_at=AT - timedelta(hours=2))
    jobs = [_owned("master-0", "n1", kind), _owned("worker-0", "n2", kind, uid=worker_uid),
            _owned("worker-1", "n3", kind, uid=worker_uid)]
    return obs.model_copy(update={"jobs": jobs})


def test_the_pods_of_one_controller_are_one_job():
    """A DLRover ElasticJob's pods carry only DLRover's labels (elasticjob.dlrover/name), in no gang list: judged pod
    by pod, the workers pinned in the barrier while rank 0 saved a checkpoint were stopped (a probe's 2 false kills).
    Their owner, the ElasticJob, makes them one job: they wait while rank 0 works, and their stop needs a person
    while rank 0 shows nothing."""
    assert gang_of(_owned("w", "n1")) == ("llm", "ElasticJob", "sft")
    assert kinds(_owned_cluster(55.0)) == {}
    # Rank 0 pinned and its log not read: neither flagged nor seen working, so the workers' stops need a person.
    obs = _owned_cluster(100.0)
    del obs.logs["llm/master-0"]
    found = {f.target: f for f in run_detectors(obs, POLICY) if f.kind in ("idle", "zombie")}
    assert set(found) == {"llm/worker-0", "llm/worker-1"}
    assert all("of its distributed job (ElasticJob=sft: llm/master-0)" in (f.stop_needs_approval or "")
               for f in found.values())
    # Another ElasticJob under the same name (another uid: the old one deleted and recreated) is another job.
    assert kinds(_owned_cluster(55.0, worker_uid="uid-sft-2")) == {"llm/worker-0": "zombie", "llm/worker-1": "idle"}


def test_the_replicas_of_a_deployment_daemonset_plain_job_or_notebook_are_independent():
    """A Deployment's replicas, a DaemonSet's per-node pods, a plain Job's work-queue workers, a notebook's pod and a
    Tekton TaskRun's pod are no gang: one idle beside a busy sibling is waste. A StatefulSet's pods are (a torchrun
    StatefulSet), and so are an Argo Workflow's, except for idleness (the next test)."""
    for kind in ("Deployment", "ReplicaSet", "DaemonSet", "Job", "Notebook", "TaskRun"):
        assert gang_of(_owned("w", "n1", kind)) is None, kind
        # Each judged alone (a Deployment's pods as services: advice, not a stop, agent/detectors/serving.py).
        found = {f.target for f in run_detectors(_owned_cluster(55.0, kind), POLICY) if f.target_type == "job"}
        assert found >= {"llm/worker-0", "llm/worker-1"}, kind
    assert gang_of(_owned("w", "n1", "StatefulSet")) == ("llm", "StatefulSet", "sft")
    # A gang label wins over the owner: a PyTorchJob's pods are grouped by its label, as before.
    assert gang_of(job("llm/w", labels=GANG, owner_kind="PyTorchJob", owner_name="x")) == (
        "llm", "training.kubeflow.org/job-name", "sft")
    assert gang_of(job("llm/w", labels={}, owner_kind="Pod", owner_name=None)) is None


def test_an_argo_workflows_idle_step_is_its_own_waste_and_a_pinned_one_waits_for_its_peers():
    """One shard of a six-way Argo fan-out hung at 0 % while the others worked all day was never reported: a Workflow's
    pods were one gang, the shard a "waiting rank" (argo-workflows#13979). A step idle at 0 % waits on no sibling;
    one pinned in a collective (a torchrun fan-out with a rendezvous, a reviewer's case) still waits for its peers."""
    assert kinds(_owned_cluster(55.0, "Workflow")) == {"llm/worker-1": "idle"}
    assert kinds(_owned_cluster(55.0)) == {}  # any other owner: both wait while rank 0 works


def test_a_stop_needs_the_whole_job_behind_it():
    """Rank 0 writes a checkpoint to NFS on the CPU: its own GPU idles, its other 3 spin in the barrier, and the
    node's NFS client moves the bytes, so nothing the pod shows is work, nor idle, nor hung. Its flagged siblings
    are still warned, but their stop waits for a person: a stop kills the whole job on the word of part of it."""
    from tests.test_detectors import gpu

    obs = cluster(100.0, master_log_at=AT - timedelta(hours=2))  # "Saving checkpoint ...", then nothing
    master = [g for g in obs.gpus if g.job == "llm/master-0"]
    obs.gpus[obs.gpus.index(master[0])] = gpu("llm/master-0", [0.0] * 24, node="n1", index=0)
    found = {f.target: f for f in run_detectors(obs, POLICY) if f.kind in ("idle", "zombie")}
    # master-0, 3 GPUs pinned and 1 at 0 %, reads as a rank stuck on the host: a hang whose stop needs a person.
    assert "idle beside pinned ones" in (found.pop("llm/master-0").stop_needs_approval or "")
    assert set(found) == {"llm/worker-0", "llm/worker-1"}
    for f in found.values():
        assert f.stop_needs_approval and "llm/master-0" in f.stop_needs_approval
        assert "stop needs a person" in f.evidence
    # master-0 unread (its log not read, so it cannot be called hung) and showing nothing: neither flagged nor seen
    # working, the siblings' stop still needs a person.
    obs = cluster(100.0, master_log_at=AT - timedelta(hours=2))
    master = [g for g in obs.gpus if g.job == "llm/master-0"]
    obs.gpus[obs.gpus.index(master[0])] = gpu("llm/master-0", [0.0] * 24, node="n1", index=0)
    del obs.logs["llm/master-0"]
    found = {f.target: f for f in run_detectors(obs, POLICY) if f.kind in ("idle", "zombie")}
    assert set(found) == {"llm/worker-0", "llm/worker-1"}
    assert all("neither idle nor hung" in (f.stop_needs_approval or "") for f in found.values())
    assert all("process CPU" not in (f.stop_needs_approval or "") for f in found.values())
    # The same with master-0's CPU at one core (an evaluation on the CPU, or a spin): the approver is shown it.
    ios = [io("llm/master-0", 24, cpu=100.0) if i.job == "llm/master-0" else i for i in obs.io]
    obs = obs.model_copy(update={"io": ios})
    found = {f.target: f for f in run_detectors(obs, POLICY) if f.kind in ("idle", "zombie")}
    assert all("llm/master-0's process CPU is up to 100% of a core" in (f.stop_needs_approval or "")
               for f in found.values()) and set(found) == {"llm/worker-0", "llm/worker-1"}
    # Every pod flagged (the survivors of a dead rank): no pod is unexplained.
    assert all("neither idle nor hung" not in (f.stop_needs_approval or "")
               for f in run_detectors(cluster(100.0), POLICY))


def test_one_pods_doubt_is_the_whole_jobs():
    """Every pod flagged, but the pinned pods' zombie stops need a person (no power reading, no profiling fields: a
    memory-bound rank looks the same): the idle-looking pod's stop would kill them too, so it needs a person."""
    found = {f.target: f for f in run_detectors(cluster(100.0), POLICY)}
    assert found["llm/worker-0"].stop_needs_approval and "no power reading" in found["llm/worker-0"].stop_needs_approval
    idle = found["llm/worker-1"]
    assert idle.kind == "idle" and "llm/master-0" in (idle.stop_needs_approval or "")
    assert "a stop of any pod kills it too" in idle.stop_needs_approval


def test_the_components_of_a_slurm_heterogeneous_job_are_one_job():
    """Component 0 (one GPU, a coordinator) idles while component 1 trains on 8 in another partition: scancel of
    component 0 cancels both, so it waits for its sibling like a rank does (a probe stopped it at 120m)."""
    from core.cluster import SLURM_HET_JOB_LABEL

    het = {SLURM_HET_JOB_LABEL: "31"}
    jobs = [pod("het-0", "n1", het, namespace="gpu"), pod("het-1", "n2", het, namespace="gpu-big")]
    gpus = job_gpus("gpu/het-0", [85.0] * 6 + [0.0] * 18, node="n1") + job_gpus("gpu-big/het-1", [55.0] * 24, node="n2")
    nodes = [NodeInfo(name=n, pool="a100", gpus=8, jobs=[j.id for j in jobs if j.node == n]) for n in ("n1", "n2")]
    obs = observe(jobs, gpus, [io(j.id, 24) for j in jobs], {}, nodes=nodes)
    assert kinds(obs) == {}
    alone = [pod("het-0", "n1", {}, namespace="gpu"), jobs[1]]
    assert kinds(observe(alone, gpus, [io(j.id, 24) for j in alone], {}, nodes=nodes)) == {"gpu/het-0": "idle"}


RAY = {"ray.io/cluster": "sft", "ray.io/node-type": "worker"}


def _ray(cpu_worker_cpu: float, cpu_worker_net: float = 0.0):
    """Two KubeRay GPU workers at 0 % for 2 h, and a CPU-only worker pod of the same cluster (no GPU series)."""
    gpu_a, gpu_b = pod("gpu-a", "n1", RAY), pod("gpu-b", "n2", RAY)
    cpu_w = job("llm/cpu-a", gpus=0, node="n3", labels=RAY)
    jobs = [gpu_a, gpu_b, cpu_w]
    gpus = job_gpus("llm/gpu-a", [0.0] * 24, node="n1") + job_gpus("llm/gpu-b", [0.0] * 24, node="n2")
    ios = [io("llm/gpu-a", 24), io("llm/gpu-b", 24), io("llm/cpu-a", 24, cpu=cpu_worker_cpu, net=cpu_worker_net)]
    nodes = [NodeInfo(name=n, pool="a100", gpus=8, jobs=[j.id for j in jobs if j.node == n]) for n in ("n1", "n2", "n3")]
    return observe(jobs, gpus, ios, {}, nodes=nodes)


def test_ray_gpu_workers_wait_while_the_clusters_cpu_workers_shuffle():
    """ray#26630: GPU workers idle while CPU-only pods of the same RayCluster prepare the data were stopped (judged
    alone; a pod without GPUs had no evidence to give). Its CPU beyond a spin, or its network, is work now."""
    assert kinds(_ray(cpu_worker_cpu=1400.0)) == {}
    assert kinds(_ray(cpu_worker_cpu=20.0, cpu_worker_net=150.0)) == {}
    # An idle Ray cluster (its CPU pod at a few %): the GPU workers are idle, and their stop needs nobody extra.
    idle = [f for f in run_detectors(_ray(cpu_worker_cpu=20.0), POLICY) if f.kind == "idle"]
    assert {f.target for f in idle} == {"llm/gpu-a", "llm/gpu-b"} and all(not f.stop_needs_approval for f in idle)


def test_a_busy_ray_gpu_worker_leaves_an_idle_one_warned_and_a_launcher_without_gpus_still_raises_doubt():
    """A review: one busy GPU worker of a shared Ray cluster hid an idle one altogether (Ray workers need not wait for
    each other: the finding stands, its stop for a person); and a Kubeflow job's launcher without GPUs, quiet to the
    steward's counters, no longer made its idle workers' stop need a person."""
    busy, idle_w = pod("gpu-a", "n1", RAY), pod("gpu-b", "n2", RAY)
    gpus = job_gpus("llm/gpu-a", [70.0] * 24, node="n1") + job_gpus("llm/gpu-b", [0.0] * 24, node="n2")
    nodes = [NodeInfo(name=n, pool="a100", gpus=8, jobs=[f"llm/gpu-{x}"]) for n, x in (("n1", "a"), ("n2", "b"))]
    found = [f for f in run_detectors(observe([busy, idle_w], gpus, [io("llm/gpu-a", 24), io("llm/gpu-b", 24)], {},
                                              nodes=nodes), POLICY) if f.kind == "idle"]
    assert [f.target for f in found] == ["llm/gpu-b"] and "another GPU worker of its Ray cluster" in (
        found[0].stop_needs_approval or "")

    launcher = job("llm/launcher", gpus=0, node="n3", labels=GANG)
    w0, w1 = pod("worker-0", "n1"), pod("worker-1", "n2")
    gpus = job_gpus("llm/worker-0", [0.0] * 24, node="n1") + job_gpus("llm/worker-1", [0.0] * 24, node="n2")
    ios = [io("llm/worker-0", 24), io("llm/worker-1", 24), io("llm/launcher", 24, cpu=100.0)]
    nodes = [NodeInfo(name=n, pool="a100", gpus=8, jobs=[j]) for n, j in
             (("n1", "llm/worker-0"), ("n2", "llm/worker-1"), ("n3", "llm/launcher"))]
    found = [f for f in run_detectors(observe([launcher, w0, w1], gpus, ios, {}, nodes=nodes), POLICY)
             if f.kind == "idle"]
    assert {f.target for f in found} == {"llm/worker-0", "llm/worker-1"}
    assert all("neither idle nor hung" in (f.stop_needs_approval or "") for f in found)
    # The launcher working beyond a spin (a CPU-side evaluation at 600 %): the workers wait for it.
    ios[-1] = io("llm/launcher", 24, cpu=600.0)
    assert kinds(observe([launcher, w0, w1], gpus, ios, {}, nodes=nodes)) == {}


def test_a_sibling_without_gpus_quiet_on_every_counter_raises_no_doubt_and_one_unread_still_does():
    """A heterogeneous job's CPU component whose step was OOM-killed: its CPU, network and disk are read and quiet
    all window. It made the idle GPU component's stop need a person ("neither idle nor hung, nor seen working"), the
    request expired, and 4 GPUs stayed held all day. Counters missing are still a doubt: unknown is not idle."""
    from core.cluster import SLURM_HET_JOB_LABEL

    het = {SLURM_HET_JOB_LABEL: "48390"}
    cpu_part, gpu_part = job("cpu/etl", gpus=0, node="n2", labels=het), pod("etl", "n1", het, namespace="gpu")
    gpus = job_gpus("gpu/etl", [0.0] * 24, node="n1")
    nodes = [NodeInfo(name="n1", pool="a100", gpus=8, jobs=["gpu/etl"]), NodeInfo(name="n2", pool="cpu", gpus=0,
                                                                                  jobs=["cpu/etl"])]

    def idle(cpu_io):
        obs = observe([cpu_part, gpu_part], gpus, [io("gpu/etl", 24), *cpu_io], {}, nodes=nodes)
        return [f for f in run_detectors(obs, POLICY) if f.kind == "idle"]

    [f] = idle([io("cpu/etl", 24, cpu=0.3)])
    assert f.target == "gpu/etl" and not f.stop_needs_approval
    [f] = idle([])  # the CPU component's counters are not read
    assert "neither idle nor hung" in (f.stop_needs_approval or "")
    [f] = idle([io("cpu/etl", 24, cpu=100.0)])  # a core busy: a spin, or work the counters cannot name
    assert "neither idle nor hung" in (f.stop_needs_approval or "")
    assert idle([io("cpu/etl", 24, cpu=0.3, disk=40.0)]) == []  # it reads its input: the GPU component waits
