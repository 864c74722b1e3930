"""Which job a GPU process belongs to: its Kubernetes pod (from /proc/<pid>/cgroup) or its Slurm job."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# cgroupfs: .../kubepods/burstable/pod<uid>/<container>; systemd: ...-pod<uid with _>.slice/...
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_SLURM_JOB = re.compile(r"/job_(\d+)(?:/|$)")


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    """What a PID runs for: a pod (UID, and namespace/pod when the lookup knows it) or a Slurm job id."""

    pod_uid: str | None = None
    pod: str | None = None  # namespace/pod
    slurm_job: str | None = None


class PidJobs:
    """Maps PIDs to owners. `pod_for_uid` turns a pod UID into namespace/pod (e.g. from the kubelet or the
    Kubernetes API); without it, pods stay known by UID only. `proc` is /proc (a folder for tests)."""

    def __init__(self, proc: str | Path = "/proc", pod_for_uid: Callable[[str], str | None] | None = None) -> None:
        self.proc = Path(proc)
        self.pod_for_uid = pod_for_uid

    def _read(self, pid: int, name: str) -> bytes | None:
        try:
            return (self.proc / str(pid) / name).read_bytes()
        except OSError:  # the process ended, or we may not read it: unknown, not an error
            return None

    def owner(self, pid: int) -> ProcessOwner:
        cgroup = (self._read(pid, "cgroup") or b"").decode("utf-8", "replace")
        match = _POD_UID.search(cgroup)
        if match:
            uid = match.group(1).replace("_", "-")
            pod = self.pod_for_uid(uid) if self.pod_for_uid else None
            return ProcessOwner(pod_uid=uid, pod=pod)
        match = _SLURM_JOB.search(cgroup)
        if match:
            return ProcessOwner(slurm_job=match.group(1))
        environ = self._read(pid, "environ") or b""
        for item in environ.split(b"\0"):
            if item.startswith(b"SLURM_JOB_ID="):
                return ProcessOwner(slurm_job=item.split(b"=", 1)[1].decode("ascii", "replace"))
        return ProcessOwner()
