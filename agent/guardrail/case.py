"""The case the guardrail decides: an action, fresh facts, policy and history, and helpers the rules share."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field

from agent.config.policy import Policy
from agent.guardrail.protection import as_utc
from core.actions import ACTION_LEVELS, NODE_ACTIONS, STOP_ACTIONS, Finding, History, HistoryEntry, ProposedAction
from core.cluster import JobInfo, PoolInfo

HOUR = timedelta(hours=1)
STOPPABLE_STATES = ("running", "stopping")


def signalled_state(job: JobInfo, history: History) -> str:
    """The job's state as the steward knows it: "stopping" for one still running after a graceful stop of this very
    run (its uid, started before the stop) was carried out. A scheduler without a stopping state (Slurm) lists a
    signalled job as running, and only the process that signalled it remembers otherwise: after a restart (a cron
    `steward sweep` always is one) the audit is what tells that it was signalled, for every rule and planner.
    A stop dated ahead of the clock counts too: what holds back is read in the safe direction."""
    if job.state != "running":
        return job.state
    uid = job.uid or None
    stops = [as_utc(e.at) for e in history.of_job(uid, job.id) if e.action == "terminate" and e.status == "executed"]
    if stops and (job.started_at is None or as_utc(job.started_at) <= max(stops)):
        return "stopping"
    return job.state


class Facts(BaseModel):
    """Fresh facts about the target, gathered right before deciding."""

    model_config = ConfigDict(extra="forbid")

    now: datetime
    job: JobInfo | None = None  # job actions; None = the scheduler does not know it
    pool: PoolInfo | None = None  # resize_pool
    findings: list[Finding] = []  # current findings for this target
    # The other pods of the target's distributed job (core.cluster.job_gang), read with it: a keep or protection on
    # any of them holds for the target (a stop of one pod ends the job). Empty for a job of its own.
    gang: list[JobInfo] = []
    # Why the GPU metrics the target's findings rest on are stale (its own, or a pod's of its distributed job): no
    # sample in the newest slice of the read (agent/graph/deps.py stale_job_metrics), with when they last had one.
    # None when they are fresh, or the target is no job.
    stale_metrics: str | None = None
    cluster_gpus: int = Field(0, ge=0)  # total GPUs in the cluster (context for the breaker)


@dataclass(frozen=True)
class Case:
    action: ProposedAction
    facts: Facts
    policy: Policy
    history: History
    now: datetime  # facts.now in UTC

    @cached_property
    def job(self) -> JobInfo | None:
        """The job the action is about; a pool resize or a node cordon is about no job, whatever facts came along.
        Its state is the one the steward knows (signalled_state): a Slurm job it sent a graceful stop is stopping."""
        job = None if self.action.action in ("resize_pool", *NODE_ACTIONS) else self.facts.job
        if job is None:
            return None
        state = signalled_state(job, self.history)
        return job if state == job.state else job.model_copy(update={"state": state})

    @property
    def grows_pool(self) -> bool:
        """A resize to more nodes than the pool has: only ever the scale-up back a forecast scale-down planned."""
        pool, target = self.facts.pool, self.action.target_nodes
        return self.action.action == "resize_pool" and pool is not None and target is not None and target > pool.nodes

    @property
    def level(self) -> int:
        if self.grows_pool:  # growing a pool back to its own earlier size: the policy's scale_up_level (3 or 4)
            return self.policy.detectors.pools.scale_up_level
        return ACTION_LEVELS[self.action.action]

    @property
    def is_stop(self) -> bool:
        return self.action.action in STOP_ACTIONS

    @property
    def target(self) -> str:
        """The target as operators name it: job x, node y, pool z."""
        if self.action.action == "resize_pool":
            return f"pool {self.action.target}"
        if self.job is None:
            return f"node {self.action.target}"
        return f"job {self.action.target}"

    def levels(self) -> tuple[int, int]:
        job = self.job
        return self.policy.levels_for(job.namespace, job.project) if job else self.policy.levels_for(None, None)

    def scope(self) -> str:
        job = self.job
        if job is None:
            return "the global levels"
        return f"namespace {job.namespace!r}" + (f" / project {job.project!r}" if job.project else "")

    @property
    def done(self) -> tuple[str, ...]:
        # A dry run escalates as if its earlier steps had happened, so it shows what would happen.
        return ("executed", "dry_run") if self.policy.mode == "dry_run" else ("executed",)

    @property
    def uid(self) -> str | None:
        """The target job's immutable identity: the fresh job's, else what the proposal was made for."""
        job = self.job
        return (job.uid or None) if job is not None else self.action.target_uid

    def past(self, *actions: str, statuses: tuple[str, ...] | None = None) -> list[HistoryEntry]:
        """History entries for this very job that happened, oldest first: not an earlier one under the same name (a
        namesake), under whatever name it had then (a Slurm name-based id changes when a namesake is submitted). A
        job whose backend gave no uid matches only entries under its name recorded without one (History.of_job)."""
        wanted = statuses or self.done
        found = [e for e in self.history.of_job(self.uid, self.action.target)
                 if e.action in actions and e.status in wanted]
        return sorted(found, key=lambda e: as_utc(e.at))

    def last_hour(self, entries: list[HistoryEntry]) -> list[HistoryEntry]:
        # Future-dated entries count too: for limits, the conservative reading.
        return sorted((e for e in entries if as_utc(e.at) > self.now - HOUR), key=lambda e: as_utc(e.at))


Denial = tuple[str, str] | None  # (rule, reason)
