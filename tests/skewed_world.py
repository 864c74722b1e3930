"""Helpers for lifecycle tests on real terms: a Slurm-like view of the simulator, a skewed clock."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any


class SlurmLike:
    """The simulated cluster as Slurm shows it: a signalled job still reads RUNNING (no stopping state)."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    @staticmethod
    def _as_slurm(job: Any) -> Any:
        return None if job is None else job.model_copy(
            update={"scheduler": "slurm", "state": "running" if job.state == "stopping" else job.state})

    def list_jobs(self) -> list[Any]:
        return [self._as_slurm(j) for j in self._cluster.list_jobs()]

    def get_job(self, job_id: str) -> Any:
        return self._as_slurm(self._cluster.get_job(job_id))


class Skewed:
    """A host clock `by` off the cluster's (an NTP step, another replica's clock)."""

    def __init__(self, clock: Any, by: timedelta) -> None:
        self.clock, self.by = clock, by

    def now(self) -> datetime:
        return self.clock.now() + self.by
