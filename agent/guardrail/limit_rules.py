"""Guardrail rules about time and limits: warning first, graceful first, duplicates, rate, breaker, reserve, and how
far a shrink may go."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from agent.guardrail.case import HOUR, Case, Denial
from agent.guardrail.protection import as_utc, denial_in_force, keep_answered_at, when
from core.actions import STOP_ACTIONS, STOPPABLE_KINDS, UNSURE_STOP, HistoryEntry
from core.cluster import PoolInfo
from core.durations import format_duration
from core.pool_plans import left_at, open_scale_down, scale_up_uid


def stretch_began(case: Case) -> datetime | None:
    """When the current waste the stop is about began (its finding's `since`, the end of the slice that held the
    last activity); None when no current finding of that kind is at hand (other rules refuse the stop then), or
    for kinds whose `since` is only the window's start (not a stretch of waste a warning can announce).

    No tolerance: a warning sent inside that last busy slice may have come before the activity (the owner
    answering it, say), so it announced the earlier stretch. A warning about this stretch comes a detector
    window after `since` at the earliest, so a later sweep's slices, shifted by less than one, cannot push it out."""
    kind = case.action.finding_kind
    if kind is not None and kind not in STOPPABLE_KINDS:
        return None
    current = [f.since for f in case.facts.findings if f.target == case.action.target and f.target_type == "job"
               and f.kind in STOPPABLE_KINDS and (kind is None or f.kind == kind)]
    if not current:
        return None
    # A stop that names no kind answers every current stretch: a warning must postdate the latest of them.
    return as_utc(max(current))


def warning_first_rule(case: Case) -> Denial:
    if not case.is_stop:
        return None
    notice = timedelta(seconds=case.policy.warning.min_notice)
    # A warning goes stale: one older than a repeat period plus the notice no longer announces this stop.
    oldest = case.now - notice - timedelta(seconds=case.policy.warning.repeat_every)
    kind = case.action.finding_kind
    # A warning announces the waste it was sent about: one sent before the current stretch of waste began
    # (a lull the job then worked out of) announces nothing now.
    began = stretch_began(case)
    if began is not None:
        oldest = max(oldest, began)
    # A warning the steward later tried to replace and could not (the attempt failed: a new stretch it had to
    # announce, a repeat) is superseded: what the owner last heard may not be what the stop is about.
    failed = [as_utc(e.at) for e in case.past("notify", statuses=("failed",))
              if kind is None or e.finding_kind is None or e.finding_kind == kind]
    if failed:
        oldest = max(oldest, max(failed))
    # A keep answers the warnings before it: once it lapses, the stop needs a new warning and its full notice (a
    # probe's owner who kept a job for 3 minutes was stopped at the first sweep after, on the old warning).
    # Answered (KeptAt.answers): recorded before the keep in the audit log, whatever the clock of the replica that
    # recorded the keep said (a keep dated behind the warning it answered licensed the stop on that warning once it
    # lapsed), or dated before it.
    kept = keep_answered_at(case.history, case.job, case.action.target, case.uid, case.now, case.facts.gang)

    def current(e: HistoryEntry) -> bool:
        return oldest <= as_utc(e.at) and (kept is None or not kept.answers(e))

    def announces_this_stop(e: HistoryEntry) -> bool:
        # Only a warning announces a stop: it states a deadline, about the same kind of waste, to this job. One dated
        # ahead of the clock (another replica's clock, a step back) counts too: its notice has not run.
        return e.deadline is not None and (kind is None or e.finding_kind == kind) and current(e)

    warnings = [e for e in case.past("notify") if announces_this_stop(e)]
    if not warnings:
        about = f" about {kind}" if kind else ""
        undelivered = [e for e in case.past("notify", statuses=("failed",)) if current(e) and as_utc(e.at) <= case.now]
        if undelivered:
            return "warning_first", (
                f"the warning{about} to the owner of job {case.action.target} was not delivered "
                f"({undelivered[-1].detail or 'delivery failed'}); a stop needs a delivered warning"
            )
        return "warning_first", (
            f"the owner of job {case.action.target} has not been warned{about}; a stop needs a delivered "
            f"warning stating its deadline at least {format_duration(notice.total_seconds())} earlier"
        )

    def due(entry: HistoryEntry) -> datetime:
        # A deadline promised in the message is honoured even when it is later than the notice.
        earliest = as_utc(entry.at) + notice
        return max(earliest, as_utc(entry.deadline)) if entry.deadline else earliest

    # Every warning still in force is a promise: the stop lands no earlier than the latest deadline the owner was
    # given (a repeat sent while the stop was held, or waited for a human, moves it later; an earlier warning's
    # deadline does not license a stop before the newest one's).
    latest = max(warnings, key=due)
    if due(latest) > case.now:
        return "warning_first", (
            f"the owner of job {case.action.target} was warned at {when(latest.at)}; the earliest stop is "
            f"{when(due(latest))} (notice period {format_duration(notice.total_seconds())})"
        )
    # A stop of one pod of a distributed job ends the whole job: none of its pods stops before the latest deadline
    # any of them was given (pods warned at different sweeps were promised different times).
    for other in case.facts.gang:
        promised = [e for e in case.history.of_job(other.uid or None, other.id)
                    if e.action == "notify" and e.status in case.done and e.deadline is not None
                    and current(e) and (kind is None or e.finding_kind == kind) and due(e) > case.now]
        if promised:
            last = max(promised, key=due)
            return "warning_first", (
                f"{other.id}, a pod of the same distributed job, was warned at {when(last.at)} that its stop is no "
                f"earlier than {when(due(last))}; a stop of job {case.action.target} ends it too"
            )
    return None


def graceful_first_rule(case: Case) -> Denial:
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


def denial_hold_rule(case: Case) -> Denial:
    """A human denied this action on this target recently: it is not done, nor asked again, while the denial holds."""
    hold = case.policy.approvals.denial_holds_for
    denied = denial_in_force(case.history, case.action.action, case.action.target, case.uid, case.now, hold)
    if denied is None:
        return None
    said = f" ({denied.reason})" if denied.reason else ""
    return "denial_hold", (
        f"{denied.by or 'a human'} denied {case.action.action} on {case.target} at {when(denied.at)}{said}; "
        f"the denial holds for {format_duration(hold)}, until {when(as_utc(denied.at) + timedelta(seconds=hold))}"
    )


def duplicate_rule(case: Case) -> Denial:
    action, job = case.action, case.job
    if action.action == "notify":
        every = timedelta(seconds=case.policy.warning.repeat_every)
        # A new stretch of waste (the job worked in between) is a new violation: its warning is not a repeat.
        began = stretch_began(case)
        after = case.now - every if began is None else max(case.now - every, began)
        # A keep answered the warnings before it.
        kept = keep_answered_at(case.history, case.job, case.action.target, case.uid, case.now, case.facts.gang)
        recent = [e for e in case.past("notify") if e.finding_kind == action.finding_kind and as_utc(e.at) > after
                  and (kept is None or not kept.answers(e))]
        if recent:
            last = recent[-1]
            about = f" about {action.finding_kind}" if action.finding_kind else ""
            return "duplicate", (
                f"the owner of {case.target} was already notified{about} at {when(last.at)}; at most one "
                f"message per {format_duration(every.total_seconds())}, next after {when(as_utc(last.at) + every)}"
            )
    if case.is_stop and job is not None and job.state == "stopping":
        done = case.past(action.action)
        if done and action.action == "force_terminate":
            # Forced and still not gone: the scheduler cannot end it (a node that does not answer, a process stuck in
            # the kernel). Another force would change nothing; a person has to look.
            return "already_done", (
                f"job {job.id} was force-stopped at {when(done[-1].at)} and is still stopping: the scheduler has not "
                f"ended it (check its node: unreachable, or a process stuck in the kernel); a force is not sent twice"
            )
        if done:
            return "already_done", (
                f"job {job.id} was sent {action.action} at {when(done[-1].at)} and is stopping; "
                f"waiting for the {format_duration(case.policy.stop.grace_period)} grace period"
            )
        if action.action == "terminate":
            # Someone asked already (an answer lost to a timeout, a process killed before its audit, the owner):
            # a graceful stop is never sent twice; only an approved force may follow.
            asked = f" since {when(job.stop_requested_at)}" if job.stop_requested_at else ""
            return "already_stopping", f"job {job.id} is already stopping{asked}; a graceful stop is not sent twice"
    if action.action == "terminate" and job is not None and job.state == "running":
        # A process killed around its graceful stop left it unknown whether the SIGTERM went out (Slurm shows none):
        # the job may be checkpointing on it. A second one waits out the grace period, as a forced stop would.
        grace = timedelta(seconds=case.policy.stop.grace_period)
        unsure = [e for e in case.past("terminate", statuses=("skipped",)) if e.detail.startswith(UNSURE_STOP)]
        if unsure and as_utc(unsure[-1].at) + grace > case.now:
            return "already_stopping", (
                f"job {job.id} may have been sent a graceful stop (the steward was interrupted around it; settled at "
                f"{when(unsure[-1].at)}); another is not sent before its grace period ends at "
                f"{when(as_utc(unsure[-1].at) + grace)}")
    if action.key() in case.history.pending_approvals:
        return "duplicate", f"the same {action.action} on {case.target} is already awaiting approval"
    return None


def all_done(case: Case, *actions: str) -> list[HistoryEntry]:
    return case.history.of_action(actions, tuple(case.done))


def rate_limit_rule(case: Case) -> Denial:
    if not case.is_stop:
        return None
    limit = case.policy.rate_limits.stops_per_hour
    recent = case.last_hour(all_done(case, *STOP_ACTIONS))
    if len(recent) >= limit:
        if limit == 0:
            return "rate_limit", "rate_limits.stops_per_hour is 0: automatic stops are switched off"
        opens = as_utc(recent[len(recent) - limit].at) + HOUR
        return "rate_limit", (
            f"{len(recent)} stops in the last hour reach the limit of {limit} per hour; "
            f"the next stop is possible at {when(opens)}"
        )
    return None


def circuit_breaker_rule(case: Case) -> Denial:
    if case.level < 2:
        return None
    breaker = case.policy.rate_limits.circuit_breaker
    # Actions on the cluster that failed: a warning the mail server refused says nothing about stopping or
    # resizing (and no stop goes without a delivered warning anyway); it paused every stop for an hour.
    failures = case.last_hour([e for e in case.history.entries if e.status == "failed" and e.action != "notify"])
    if len(failures) >= breaker.max_failures_per_hour:
        return "circuit_breaker", (
            f"{len(failures)} actions on the cluster failed in the last hour (the breaker trips at "
            f"{breaker.max_failures_per_hour}); mutating actions pause until {when(as_utc(failures[0].at) + HOUR)}"
        )
    job = case.job
    if not case.is_stop or job is None:
        return None
    # A force after a terminate reclaims the same GPUs: count each job once.
    by_job: dict[str, int] = {}
    for e in case.last_hour(all_done(case, *STOP_ACTIONS)):
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


def planned_growth(case: Case, pool: PoolInfo, target: int) -> Denial:
    """A pool is grown only back to the size an executed forecast scale-down recorded, by that scale-down's own
    scale-up (its identity), onto the pool as that scale-down left it, and never above max_nodes."""
    name = f"pool {pool.name}"
    down = open_scale_down(case.history, pool.name)
    if down is None:
        return "reserve", (f"{name} has {pool.nodes} nodes; growing it to {target} undoes no open forecast scale-down "
                           "(growing a pool is the steward's job only to undo its own planned scale-down)")
    if case.action.target_uid != scale_up_uid(down):
        return "reserve", f"the resize of {name} names another scale-down than its open one ({down.at:%H:%M} UTC)"
    if pool.nodes != left_at(down):
        return "reserve", (f"{name} has {pool.nodes} nodes, not the {left_at(down)} its scale-down at "
                           f"{down.at:%H:%M} UTC left: it changed since, so the planned scale-up no longer applies")
    if down.scale_up_nodes is None or target > down.scale_up_nodes:
        return "reserve", f"{target} nodes is above the {down.scale_up_nodes} nodes {name} had before its scale-down"
    if pool.max_nodes is not None and target > pool.max_nodes:
        return "reserve", f"{target} nodes is above the maximum of {pool.max_nodes} for {name}"
    return None


def reserve_rule(case: Case) -> Denial:
    pool, target = case.facts.pool, case.action.target_nodes
    if case.action.action != "resize_pool" or pool is None:
        return None
    name = f"pool {pool.name}"
    if target is None:
        return "reserve", f"resize of {name} names no target node count"
    if target > pool.nodes:
        return planned_growth(case, pool, target)
    if target == pool.nodes:
        return "reserve", f"{name} has {pool.nodes} nodes; {target} does not shrink it"
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


def finding_size_rule(case: Case) -> Denial:
    """A shrink goes no further than the pool's fresh oversized finding allows: its suggested size keeps the GPUs in
    use, the queued work, the reserve and min_nodes. A size approved earlier, or a model's own, was judged on facts
    that may have changed since (work queued meanwhile), and no one judged a deeper cut against these."""
    pool, target = case.facts.pool, case.action.target_nodes
    if case.action.action != "resize_pool" or pool is None or target is None or target >= pool.nodes:
        return None
    sized = [f for f in case.facts.findings if f.target == case.action.target and f.target_type == "pool"
             and f.kind == "oversized" and "suggested_nodes" in f.metrics]
    if not sized:
        return None
    finding = max(sized, key=lambda f: f.metrics["suggested_nodes"])
    m = finding.metrics
    keep = math.ceil(round(m["suggested_nodes"], 9))
    if target >= keep:
        return None
    queued = f", {m['queued_gpus']:g} queued" if m.get("queued_gpus") else ""
    return "finding_size", (
        f"{target} nodes is below the {keep} nodes the current oversized finding for pool {pool.name} keeps "
        f"({m.get('used_gpus', 0):g} GPUs in use{queued}, the reserve and min_nodes {pool.min_nodes}); a shrink goes "
        "no further than the fresh finding allows, whatever size was proposed or approved"
    )
