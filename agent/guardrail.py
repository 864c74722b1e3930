"""The guardrail: a pure function of (proposed action, fresh facts, policy, history) -> decision.

Nothing here reads a clock, a file or the network. Rules run in a fixed order and the
first that decides wins; `approved=True` only satisfies the last one (human approval).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from agent.models import (
    ACTION_LEVELS,
    STOP_ACTIONS,
    STOPPABLE_KINDS,
    Decision,
    Finding,
    History,
    HistoryEntry,
    ProposedAction,
)
from agent.policy import Policy
from agent.protection import as_utc, protection_reason, when
from sim.durations import format_duration
from tools.models import JobInfo, PoolInfo

__all__ = ["Facts", "decide", "protection_reason"]

HOUR = timedelta(hours=1)
_STOPPABLE_STATES = ("running", "stopping")


class Facts(BaseModel):
    """Fresh facts about the target, gathered right before deciding."""

    model_config = ConfigDict(extra="forbid")

    now: datetime
    job: JobInfo | None = None  # job actions; None = the scheduler does not know it
    pool: PoolInfo | None = None  # resize_pool
    findings: list[Finding] = []  # current findings for this target
    cluster_gpus: int = Field(0, ge=0)  # total GPUs in the cluster (context for the breaker)


@dataclass(frozen=True)
class _Case:
    action: ProposedAction
    facts: Facts
    policy: Policy
    history: History
    now: datetime  # facts.now in UTC

    @property
    def job(self) -> JobInfo | None:
        """The job the action is about; a pool resize is about no job, whatever facts came along."""
        return None if self.action.action == "resize_pool" else self.facts.job

    @property
    def level(self) -> int:
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

    def past(self, *actions: str) -> list[HistoryEntry]:
        """History entries for this target that happened, oldest first."""
        found = [
            e
            for e in self.history.entries
            if e.target == self.action.target and e.action in actions and e.status in self.done
        ]
        return sorted(found, key=lambda e: as_utc(e.at))

    def last_hour(self, entries: list[HistoryEntry]) -> list[HistoryEntry]:
        # Future-dated entries count too: for limits, the conservative reading.
        return sorted((e for e in entries if as_utc(e.at) > self.now - HOUR), key=lambda e: as_utc(e.at))


_Denial = tuple[str, str] | None  # (rule, reason)


def _mode(case: _Case) -> _Denial:
    if case.policy.mode == "observe":
        return "mode", f"policy mode is observe (level 0, observe only): no {case.action.action} on {case.target}"
    return None


def _node_findings(case: _Case) -> list[Finding]:
    return [f for f in case.facts.findings if f.target == case.action.target and f.target_type == "node"]


def _unknown_target(case: _Case) -> _Denial:
    action, facts = case.action, case.facts
    if action.action == "resize_pool":
        if facts.pool is None:
            return "unknown_target", f"pool {action.target} is not known (no fresh pool facts); nothing to resize"
        if facts.pool.name != action.target:
            return "unknown_target", f"the fresh facts are for pool {facts.pool.name}, not {action.target}"
        return None
    if facts.job is not None:
        if facts.job.id != action.target:
            return "unknown_target", f"the fresh facts are for job {facts.job.id}, not {action.target}"
        return None
    if action.action == "notify" and _node_findings(case):
        return None  # a node-health notice: the target is a node, not a job
    return "unknown_target", (
        f"the scheduler does not know job {action.target} (it may have finished) "
        f"and there is no node finding for it; nothing to {action.action}"
    )


def _not_running(case: _Case) -> _Denial:
    job = case.job
    if case.is_stop and job is not None and job.state not in _STOPPABLE_STATES:
        return "not_running", f"job {job.id} is {job.state}; only running or stopping jobs are stopped"
    return None


def _protected(case: _Case) -> _Denial:
    job = case.job
    if job is None:
        return None
    why = protection_reason(job, case.policy, case.history, case.now)
    if why:
        return "protected", f"job {job.id} is protected: {why}; no {case.action.action}"
    return None


def _no_finding(case: _Case) -> _Denial:
    action, kind = case.action, case.action.finding_kind
    if action.action == "resize_pool":
        oversized = [
            f
            for f in case.facts.findings
            if f.target == action.target and f.target_type == "pool" and f.kind == "oversized"
        ]
        if not oversized:
            return "no_finding", f"no current oversized finding for pool {action.target}; it is not resized"
        return None
    target_type = "job" if case.job is not None else "node"
    current = [f for f in case.facts.findings if f.target == action.target and f.target_type == target_type]
    seen = ", ".join(sorted({f.kind for f in current})) or "none"
    if case.is_stop:
        if kind is not None and kind not in STOPPABLE_KINDS:
            return (
                "no_finding",
                f"a {kind} finding never justifies a stop (only idle or zombie do); job {action.target}",
            )
        stoppable = [f for f in current if f.kind in STOPPABLE_KINDS and (kind is None or f.kind == kind)]
        if not stoppable:
            wanted: str = kind or "idle or zombie"
            return "no_finding", (
                f"no current {wanted} finding for job {action.target} (current findings: {seen}); "
                "the detectors did not flag it, so it is not stopped"
            )
        return None
    if not [f for f in current if kind is None or f.kind == kind]:
        wanted = f"{kind} finding" if kind else "finding"
        return "no_finding", f"no current {wanted} for {case.target} (current findings: {seen}); nothing to notify"
    return None


def _level_ceiling(case: _Case) -> _Denial:
    _, hard_max = case.levels()
    if case.level > hard_max:
        return "level_ceiling", (
            f"{case.action.action} is level {case.level}, above the ceiling {hard_max} for {case.scope()}"
        )
    return None


def _warning_first(case: _Case) -> _Denial:
    if not case.is_stop:
        return None
    notice = timedelta(seconds=case.policy.warning.min_notice)
    # A warning goes stale: one older than a repeat period plus the notice no longer announces this stop.
    oldest = case.now - notice - timedelta(seconds=case.policy.warning.repeat_every)
    warnings = [e for e in case.past("notify") if oldest <= as_utc(e.at) <= case.now]
    if not warnings:
        return "warning_first", (
            f"the owner of job {case.action.target} has not been warned; a stop needs a warning "
            f"at least {format_duration(notice.total_seconds())} earlier"
        )

    def due(entry: HistoryEntry) -> datetime:
        # A deadline promised in the message is honoured even when it is later than the notice.
        earliest = as_utc(entry.at) + notice
        return max(earliest, as_utc(entry.deadline)) if entry.deadline else earliest

    first = min(warnings, key=due)
    if due(first) > case.now:
        return "warning_first", (
            f"the owner of job {case.action.target} was warned at {when(first.at)}; the earliest stop is "
            f"{when(due(first))} (notice period {format_duration(notice.total_seconds())})"
        )
    return None


def _graceful_first(case: _Case) -> _Denial:
    if case.action.action != "force_terminate":
        return None
    grace = timedelta(seconds=case.policy.stop.grace_period)
    stops = [e for e in case.past("terminate") if as_utc(e.at) <= case.now]
    if not stops:
        return "graceful_first", (
            f"job {case.action.target} has not been asked to stop gracefully; force_terminate comes only "
            f"after a terminate and its {format_duration(grace.total_seconds())} grace period"
        )
    first = stops[0]
    if as_utc(first.at) + grace > case.now:
        return "graceful_first", (
            f"job {case.action.target} was sent a graceful stop at {when(first.at)}; its grace period "
            f"({format_duration(grace.total_seconds())}) ends at {when(as_utc(first.at) + grace)}"
        )
    return None


def _duplicate(case: _Case) -> _Denial:
    action, job = case.action, case.job
    if action.action == "notify":
        every = timedelta(seconds=case.policy.warning.repeat_every)
        recent = [
            e for e in case.past("notify") if e.finding_kind == action.finding_kind and as_utc(e.at) > case.now - every
        ]
        if recent:
            last = recent[-1]
            about = f" about {action.finding_kind}" if action.finding_kind else ""
            return "duplicate", (
                f"the owner of {case.target} was already notified{about} at {when(last.at)}; at most one "
                f"message per {format_duration(every.total_seconds())}, next after {when(as_utc(last.at) + every)}"
            )
    if case.is_stop and job is not None and job.state == "stopping":
        done = case.past(action.action)
        if done:
            return "already_done", (
                f"job {job.id} was sent {action.action} at {when(done[-1].at)} and is stopping; "
                f"waiting for the {format_duration(case.policy.stop.grace_period)} grace period"
            )
    if action.key() in case.history.pending_approvals:
        return "duplicate", f"the same {action.action} on {case.target} is already awaiting approval"
    return None


def _all(case: _Case, *actions: str) -> list[HistoryEntry]:
    return [e for e in case.history.entries if e.action in actions and e.status in case.done]


def _rate_limit(case: _Case) -> _Denial:
    if not case.is_stop:
        return None
    limit = case.policy.rate_limits.stops_per_hour
    recent = case.last_hour(_all(case, *STOP_ACTIONS))
    if len(recent) >= limit:
        if limit == 0:
            return "rate_limit", "rate_limits.stops_per_hour is 0: automatic stops are switched off"
        opens = as_utc(recent[len(recent) - limit].at) + HOUR
        return "rate_limit", (
            f"{len(recent)} stops in the last hour reach the limit of {limit} per hour; "
            f"the next stop is possible at {when(opens)}"
        )
    return None


def _circuit_breaker(case: _Case) -> _Denial:
    if case.level < 2:
        return None
    breaker = case.policy.rate_limits.circuit_breaker
    failures = case.last_hour([e for e in case.history.entries if e.status == "failed"])
    if len(failures) >= breaker.max_failures_per_hour:
        return "circuit_breaker", (
            f"{len(failures)} actions failed in the last hour (the breaker trips at "
            f"{breaker.max_failures_per_hour}); mutating actions pause until {when(as_utc(failures[0].at) + HOUR)}"
        )
    job = case.job
    if not case.is_stop or job is None:
        return None
    # A force after a terminate reclaims the same GPUs: count each job once.
    by_job: dict[str, int] = {}
    for e in case.last_hour(_all(case, *STOP_ACTIONS)):
        by_job[e.target] = max(by_job.get(e.target, 0), e.gpus)
    reclaimed = sum(by_job.values())
    adding = 0 if job.id in by_job else job.gpus
    if reclaimed + adding > breaker.max_reclaimed_gpus_per_hour:
        of_cluster = f" of the cluster's {case.facts.cluster_gpus}" if case.facts.cluster_gpus else ""
        return "circuit_breaker", (
            f"{reclaimed} GPUs reclaimed in the last hour + {adding} for job {job.id} = {reclaimed + adding}"
            f"{of_cluster}, above the limit of {breaker.max_reclaimed_gpus_per_hour} per hour"
        )
    return None


def reserve_gpus(pool: PoolInfo, fraction: float) -> int:
    """GPUs of `pool` that are never released automatically."""
    # round() first so 0.07 * 100 is 7, not 8.
    return math.ceil(round(fraction * pool.nodes * pool.gpus_per_node, 9))


def _reserve(case: _Case) -> _Denial:
    pool, target = case.facts.pool, case.action.target_nodes
    if case.action.action != "resize_pool" or pool is None:
        return None
    name = f"pool {pool.name}"
    if target is None:
        return "reserve", f"resize of {name} names no target node count"
    if target >= pool.nodes:
        return (
            "reserve",
            f"{name} has {pool.nodes} nodes; {target} does not shrink it (growing a pool is not the steward's job)",
        )
    if target < 0 or target < pool.min_nodes:
        return "reserve", f"{target} nodes is below the minimum of {pool.min_nodes} for {name}"
    if pool.max_nodes is not None and target > pool.max_nodes:
        return "reserve", f"{target} nodes is above the maximum of {pool.max_nodes} for {name}"
    if target < pool.busy_nodes:
        return "reserve", f"{pool.busy_nodes} nodes of {name} run jobs; {target} nodes would remove a busy node"
    need = reserve_gpus(pool, case.policy.reserve.fraction)
    # Unknown usage counts busy nodes as full: the conservative reading.
    used = pool.used_gpus if pool.used_gpus is not None else pool.busy_nodes * pool.gpus_per_node
    free = target * pool.gpus_per_node - used
    if free < need:
        return "reserve", (
            f"{target} nodes leave {free} free GPUs in {name}; the reserve is {need} "
            f"({case.policy.reserve.fraction:.0%} of {pool.nodes * pool.gpus_per_node} GPUs)"
        )
    return None


_CHECKS: tuple[Callable[[_Case], _Denial], ...] = (
    _mode,
    _unknown_target,
    _not_running,
    _protected,
    _no_finding,
    _level_ceiling,
    _warning_first,
    _graceful_first,
    _duplicate,
    _rate_limit,
    _circuit_breaker,
    _reserve,
)


def _approval_needed(case: _Case) -> str | None:
    max_auto, _ = case.levels()
    if case.level > max_auto:
        return f"{case.action.action} is level {case.level}, above the automatic limit {max_auto} for {case.scope()}"
    if case.level in case.policy.levels.require_approval:
        return f"the policy requires approval for level {case.level} ({case.action.action})"
    return None


def decide(
    action: ProposedAction, facts: Facts, policy: Policy, history: History, *, approved: bool = False
) -> Decision:
    """Allow, deny or ask a human about `action`; the first rule that decides wins."""
    level = ACTION_LEVELS[action.action]
    try:
        case = _Case(action, facts, policy, history, as_utc(facts.now))
        for check in _CHECKS:
            denial = check(case)
            if denial is not None:
                return Decision(verdict="deny", rule=denial[0], reason=denial[1], level=level)
        ask = _approval_needed(case)
        if ask and not approved:
            return Decision(
                verdict="needs_approval", rule="approval", reason=f"{ask}; waiting for a human", level=level
            )
        dry_run = policy.mode == "dry_run"
        why = f"approved by a human ({ask})" if ask else "all guardrail rules pass"
        prefix = "dry run, not executed: " if dry_run else ""
        return Decision(
            verdict="allow",
            rule="allow",
            reason=f"{prefix}{action.action} on {case.target} at level {level}: {why}",
            level=level,
            dry_run=dry_run,
        )
    except Exception as exc:  # fail closed: a guardrail bug must never let an action through
        return Decision(
            verdict="deny",
            rule="internal_error",
            reason=f"the guardrail could not decide ({type(exc).__name__}: {exc}); denied to be safe",
            level=level,
        )
