"""Pods of one distributed job: a rank that waits while another works is part of a working job, not waste.

A PyTorchJob, MPIJob, Volcano job, LeaderWorkerSet or JobSet runs as several pods that live and die together:
stopping one kills the job. So do the pods of any other controller that runs them as one job (a DLRover ElasticJob,
whose labels no list names): pods without a known gang label are grouped by their controller ownerReference, except
the independent replicas of a Deployment, DaemonSet, plain Job or Notebook (core.cluster.INDEPENDENT_OWNERS). While rank 0 runs an evaluation alone, the other ranks wait in a barrier, pinned at
100 % by NCCL's polling kernel (zombie-like) or at 0 % in a gloo barrier (idle-like). Judged pod by pod, they
look hung or idle; judged as a job, the job is working. A real hang has no working rank: the survivors of a dead
rank all wait, so a stoppable finding stands only when no other pod of the job shows work.

A stop of one pod kills the whole job, so it needs the whole job behind it: when a live pod of the job is neither
flagged nor seen working (rank 0 writing a checkpoint to NFS on the CPU, its 7 other GPUs spinning in the barrier:
nothing the pod's own counters show), the siblings' findings stand for a warning, but their stop needs a person.
"""

from __future__ import annotations

from datetime import timedelta

from agent.config.policy import Policy
from agent.detectors.activity import GpuActivity
from agent.detectors.evidence import with_doubt
from agent.detectors.signals import ClusterSignals
from core.actions import Finding
from core.cluster import RAY_CLUSTER_LABEL, JobInfo, job_gang
from core.observation import Observation

# A pod with no GPU of its own spins at most this much CPU when hung (% of one core: a main loop and a poller); more is
# work (a Ray CPU worker shuffling data at 1,400 %).
GPULESS_SPIN_PCT = 200.0
WAITING_KINDS = frozenset({"idle", "zombie", "keepalive"})
# Controllers whose pods are steps run to completion each on its own (Argo Workflows): an idle step is its own waste,
# while a pinned one (a torchrun fan-out with a rendezvous) may wait for a peer, as any gang's.
STEP_OWNERS = frozenset({"Workflow"})


def gang_of(job: JobInfo) -> tuple[str, str, str] | None:
    """(namespace, label, value) naming the distributed job this pod belongs to (core.cluster.job_gang, without the
    controller's uid); None for a job of its own."""
    group = job_gang(job)
    return group[0] if group is not None else None


def shows_work(job: JobInfo, obs: Observation, signals: ClusterSignals, policy: Policy) -> str | None:
    """What shows this pod working over the idle window, in the operator's words; None when nothing does.

    Positive evidence only: its log advanced, its network or disk moved data, a GPU's utilisation sat between
    idle and pinned (a hung collective pins it, a waiting rank idles it), or its GPUs really compute (DCGM
    profiling, power, NVLink/PCIe). A pod that merely is not flagged (no log read, a window not yet full) is not
    evidence: it could be another survivor of the same hang."""
    d = policy.detectors
    series = signals.jobs.get(job.id)
    logs = obs.logs.get(job.id)
    if series is None:
        return _gpuless_work(job, obs, policy) if job.gpus <= 0 else None
    window = series.window(d.idle.window, job.gpus)
    start = window.at - timedelta(seconds=window.seconds)
    if logs is not None and logs.advanced_since(start) and logs.last_progress_at is not None:
        return f"its log advanced at {logs.last_progress_at:%H:%M} UTC"
    io = d.longtail.io_threshold_mbps
    for name, value in (("network", window.net_max), ("disk", window.disk_max), ("disk write", window.disk_write_max)):
        if value is not None and value >= io:
            return f"{name} up to {value:.1f} MB/s"
    middle = [v for v in window.gpu_avg_util if v is not None
              and d.idle.util_threshold_pct < v < d.zombie.busy_threshold_pct]
    if middle:
        return f"GPU at {max(middle):.0f}% avg util"
    if window.coverage >= d.idle.min_coverage and not window.all_quiet(d.idle.util_threshold_pct):
        work = GpuActivity.of(window, d.idle.min_coverage).real_work(d.activity)
        if work:
            return work[0]
    return None


def _gpuless_work(job: JobInfo, obs: Observation, policy: Policy) -> str | None:
    """What shows a pod without GPUs (a Ray head, a CPU worker, an MPI launcher) working over the newest half of the
    idle window (work now, not an hour ago): its log advanced, or network or disk at the active line, or CPU beyond
    what a hung process spins, in any slice read. None when nothing read shows it (its counters may not be read)."""
    d = policy.detectors
    logs = obs.logs.get(job.id)
    recent = obs.at - timedelta(seconds=d.idle.window / 2)
    if logs is not None and logs.advanced_since(recent) and logs.last_progress_at is not None:
        return f"the log of {job.id} (no GPUs) advanced at {logs.last_progress_at:%H:%M} UTC"
    io = next((s for s in obs.io if s.job == job.id), None)
    if io is None or io.slice_s <= 0:
        return None
    n = max(1, int(d.idle.window / io.slice_s) // 2)
    for name, values, line in (("network", io.net_rx_mbps, d.longtail.io_threshold_mbps),
                               ("disk", io.disk_read_mbps, d.longtail.io_threshold_mbps),
                               ("disk write", io.disk_write_mbps, d.longtail.io_threshold_mbps),
                               ("process CPU", io.cpu_pct, GPULESS_SPIN_PCT)):
        seen = [v for v in values[-n:] if v is not None]
        if seen and max(seen) >= line:
            unit = "% of a core" if name == "process CPU" else " MB/s"
            return f"{name} of {job.id} (no GPUs) up to {max(seen):.0f}{unit}"
    return None


def _gpuless_quiet(job: JobInfo, obs: Observation, policy: Policy) -> str | None:
    """What shows a pod without GPUs doing nothing over the whole idle window, every counter read: process CPU under
    `longtail.cpu_active_pct`, network and disk under `longtail.io_threshold_mbps` in every slice, on
    `idle.min_coverage` of the slices (disk writes only where the source reports them), and its log, where read,
    not advanced. None when any of them shows activity or is not read: a pod whose counters are missing stays a
    doubt (unknown is not idle)."""
    d = policy.detectors
    io = next((s for s in obs.io if s.job == job.id), None)
    if job.gpus > 0 or io is None or io.slice_s <= 0:
        return None
    logs = obs.logs.get(job.id)
    if logs is not None and logs.advanced_since(obs.at - timedelta(seconds=d.idle.window)):
        return None
    n = max(1, int(d.idle.window / io.slice_s))
    peaks = []
    for values, line in ((io.cpu_pct, d.longtail.cpu_active_pct), (io.net_rx_mbps, d.longtail.io_threshold_mbps),
                         (io.disk_read_mbps, d.longtail.io_threshold_mbps),
                         (io.disk_write_mbps, d.longtail.io_threshold_mbps)):
        seen = [v for v in values[-n:] if v is not None]
        optional = values is io.disk_write_mbps and not values  # a source that reports no disk writes at all
        if (len(seen) < d.idle.min_coverage * n and not optional) or max(seen, default=0.0) >= line:
            return None
        peaks.append(max(seen, default=0.0))
    return (f"{job.id} (no GPUs) shows no work over the idle window: process CPU up to {peaks[0]:.1f}% of a core, "
            f"network and disk under {d.longtail.io_threshold_mbps:g} MB/s")


def busy_cpu(job: JobInfo, signals: ClusterSignals, policy: Policy) -> float | None:
    """The pod's highest process CPU over the idle window when it reaches `longtail.cpu_active_pct`, else None:
    not evidence of work on its own (a hung rank spins a core too), but what an approver must be shown."""
    d = policy.detectors
    series = signals.jobs.get(job.id)
    if series is None:
        return None
    cpu = series.window(d.idle.window, job.gpus).cpu_max
    return cpu if cpu is not None and cpu >= d.longtail.cpu_active_pct else None


def spare_waiting_ranks(findings: list[Finding], obs: Observation, signals: ClusterSignals,
                        policy: Policy) -> list[Finding]:
    """The findings without idle, zombie and keep-alive findings on pods whose distributed job has another pod
    showing work: they wait for it (a barrier, an evaluation on rank 0), and a stop would kill the job. Where a
    live pod of the job is neither flagged nor seen working, the findings stay, their stop needing a person."""
    flagged = {f.target for f in findings if f.target_type == "job" and f.kind in WAITING_KINDS}
    if not flagged:
        return findings
    kinds = {f.target: f.kind for f in findings if f.target_type == "job"}
    gangs: dict[tuple[tuple[str, str, str], str], list[JobInfo]] = {}
    for job in obs.jobs:
        group = job_gang(job)
        if group is not None:
            gangs.setdefault(group, []).append(job)
    # Each gang judged once: a flagged pod waits when an unflagged pod of its gang shows work.
    waiting: set[str] = set()
    doubt: dict[str, tuple[str, str]] = {}
    in_doubt = {f.target: (f.stop_needs_approval, f.stop_needs_approval_zh or f.stop_needs_approval) for f in findings
                if f.target_type == "job" and f.kind in WAITING_KINDS and f.stop_needs_approval}
    for ((_, label, value), _uid), pods in gangs.items():
        held = [p for p in pods if p.id in flagged]
        if label in STEP_OWNERS:
            # A step idle at 0 % waits on no sibling (each step runs to completion on its own: one shard of a fan-out
            # hung while five worked all day, argo-workflows#13979); one pinned in a collective has a peer.
            held = [p for p in held if kinds.get(p.id) != "idle"]
        ray = label == RAY_CLUSTER_LABEL
        # A Ray cluster's head and CPU pods are never flagged (no GPUs), so one not seen working is no doubt: an idle
        # Ray cluster's GPU workers are idle. In other gangs a pod without GPUs (an MPI launcher) may be the one at work.
        # Elsewhere, one whose every counter is read and quiet over the window (a heterogeneous job's CPU component
        # whose step died) is no doubt either: the job shows no work anywhere, and its GPUs' findings stand.
        others = [p for p in pods if p.id not in flagged and p.state == "running"
                  and (p.gpus > 0 or (_gpuless_work(p, obs, policy) is not None if ray
                                      else _gpuless_quiet(p, obs, policy) is None))]
        if not held:
            continue
        working = [p for p in others if shows_work(p, obs, signals, policy) is not None]
        if working and (not ray or any(p.gpus <= 0 for p in working)):
            waiting.update(p.id for p in held)  # they wait for it (a Ray Train job's GPU workers for its data side)
            continue
        if working:
            # A Ray cluster's GPU workers need not wait for each other (a shared cluster's idle worker is waste), but a
            # Ray Train job's do: the finding stands, its stop for a person.
            names = ", ".join(sorted(p.id for p in working)[:3])
            why = (f"another GPU worker of its Ray cluster ({label}={value}: {names}) is working: the workers of one "
                   f"Ray Train job wait for each other, those of a shared cluster do not",
                   f"其 Ray 集群（{label}={value}：{names}）中另一个 GPU worker 正在工作：同一 Ray Train 作业的 worker "
                   f"会互相等待，共享集群的则不会")
            doubt.update((p.id, why) for p in held)
            continue
        unsure = sorted(p.id for p in held if p.id in in_doubt)
        if others:
            names = ", ".join(sorted(p.id for p in others)[:3]) + (" ..." if len(others) > 3 else "")
            busy = [(p.id, cpu) for p in others if (cpu := busy_cpu(p, signals, policy)) is not None][:2]
            cpu_en = "".join(f"; {pid}'s process CPU is up to {cpu:.0f}% of a core: an evaluation or checkpoint on "
                             f"the CPU, or a spin the steward cannot tell from one" for pid, cpu in busy)
            cpu_zh = "".join(f"；{pid} 的进程 CPU 最高 {cpu:.0f}% 个核心：可能在 CPU 上做评估或保存检查点，也可能是"
                             f"无法区分的空转" for pid, cpu in busy)
            why = (f"{len(others)} other running pod(s) of its distributed job ({label}={value}: {names}) are "
                   f"neither idle nor hung by the steward's reading, nor seen working on the GPU, log, network or "
                   f"disk{cpu_en}: a stop kills the whole job on the word of part of it",
                   f"其分布式作业（{label}={value}：{names}）中另有 {len(others)} 个运行中的 pod，既未被判定为空闲或挂起，"
                   f"也未见其在 GPU、日志、网络或磁盘上工作{cpu_zh}：仅凭作业的一部分就停止，会终止整个作业")
            doubt.update((p.id, why) for p in held)
            continue
        for p in held:
            # Another pod's stop needs a person: this one's stop would kill that pod too.
            other = next((u for u in unsure if u != p.id), None)
            if other is not None:
                en, zh = in_doubt[other]
                doubt[p.id] = (f"the stop of {other}, of the same distributed job ({label}={value}), needs a person "
                               f"({en}): a stop of any pod kills it too",
                               f"同一分布式作业（{label}={value}）中 {other} 的停止需人工批准（{zh}）：停止任何一个 pod "
                               f"都会终止它")
    out = []
    for f in findings:
        if f.target_type != "job" or f.kind not in WAITING_KINDS:
            out.append(f)
        elif f.target in waiting:
            continue
        elif f.target in doubt:
            en, zh = doubt[f.target]
            out.append(with_doubt(f, en, zh, in_evidence=f"stop needs a person: {en}"))
        else:
            out.append(f)
    return out
