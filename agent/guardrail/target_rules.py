"""Guardrail rules about the target: mode, whether it exists and runs, protection, findings, level ceiling."""

from __future__ import annotations

from agent.guardrail.case import STOPPABLE_STATES, Case, Denial
from agent.guardrail.protection import as_utc, exemption_reason, gang_protection_reason, protection_reason, when
from core.actions import NODE_ACTIONS, STOPPABLE_KINDS, Finding

# Findings judged from the scheduler alone (restarts, ended runs, the queue), not from GPU metrics: stale GPU
# metrics say nothing against them.
SCHEDULER_KINDS = frozenset({"crash_loop", "doomed", "stuck_pending"})


def mode_rule(case: Case) -> Denial:
    if case.policy.mode == "observe":
        return "mode", f"policy mode is observe (level 0, observe only): no {case.action.action} on {case.target}"
    return None


def node_findings(case: Case) -> list[Finding]:
    return [f for f in case.facts.findings if f.target == case.action.target and f.target_type == "node"]


def unknown_target_rule(case: Case) -> Denial:
    action, facts = case.action, case.facts
    if action.action == "resize_pool":
        if facts.pool is None:
            return "unknown_target", f"pool {action.target} is not known (no fresh pool facts); nothing to resize"
        if facts.pool.name != action.target:
            return "unknown_target", f"the fresh facts are for pool {facts.pool.name}, not {action.target}"
        return None
    if action.action in NODE_ACTIONS:
        if node_findings(case):
            return None
        return "unknown_target", (f"the steward's own reading has no node {action.target} with a health finding; "
                                  f"an alert alone never leads to a {action.action}")
    if facts.job is not None:
        if facts.job.id != action.target:
            return "unknown_target", f"the fresh facts are for job {facts.job.id}, not {action.target}"
        if action.target_uid and facts.job.uid != action.target_uid:
            return "replaced_target", (
                f"job {action.target} is now a different job (uid {facts.job.uid or 'unknown'}); "
                f"the {action.action} was proposed for uid {action.target_uid}, which is gone"
            )
        return None
    if action.action == "notify" and node_findings(case):
        return None  # a node-health notice: the target is a node, not a job
    return "unknown_target", (
        f"the scheduler does not know job {action.target} (it may have finished) "
        f"and there is no node finding for it; nothing to {action.action}"
    )


def not_running_rule(case: Case) -> Denial:
    job = case.job
    if case.is_stop and job is not None and job.state not in STOPPABLE_STATES:
        return "not_running", f"job {job.id} is {job.state}; only running or stopping jobs are stopped"
    return None


def protected_rule(case: Case) -> Denial:
    job = case.job
    if job is None:
        # A pool or node the API or chat exempted (POST /api/exemptions names a job, node or pool): not shrunk or
        # cordoned while the exemption holds. A grow is not held back (the steward's planned scale-up back after its
        # own shrink gives the pool's nodes back, which is what keeping them asks for).
        if case.action.action in ("resize_pool", *NODE_ACTIONS) and not (
                case.action.action == "resize_pool" and case.grows_pool):
            why = exemption_reason(case.action.target, case.history, case.now)
            if why:
                return "protected", f"{case.target} is protected: {why}; no {case.action.action}"
        return None
    why = protection_reason(job, case.policy, case.history, case.now)
    if why:
        return "protected", f"job {job.id} is protected: {why}; no {case.action.action}"
    # A pod of a distributed job whose other pod is kept or protected: stopping it ends the job that was kept.
    why = gang_protection_reason(job, case.facts.gang, case.policy, case.history, case.now)
    if why:
        return "protected", f"job {job.id} is protected: {why}; no {case.action.action}"
    return None


def stale_metrics_rule(case: Case) -> Denial:
    """An action on a job whose GPU metrics (or a pod's of its distributed job) have no sample in the newest slice of
    the fresh read: what the job does now is unknown, and unknown is not idle. Refused, whatever was decided or
    approved before; the warning and its notice stand, and the next sweep judges the job again on fresh samples.
    Findings judged from the scheduler alone (a crash loop) do not rest on GPU metrics and are not held back."""
    stale = case.facts.stale_metrics
    if not stale or case.job is None or case.action.action in ("resize_pool", *NODE_ACTIONS):
        return None
    if case.action.finding_kind in SCHEDULER_KINDS:
        return None
    return "metrics_stale", (f"{stale}; what the job does now is unknown, and unknown is not idle: no "
                             f"{case.action.action} on job {case.action.target} until these GPU metrics are fresh "
                             "again (the next sweep judges it anew)")


def no_finding_rule(case: Case) -> Denial:
    action, kind = case.action, case.action.finding_kind
    if action.action == "resize_pool" and case.grows_pool:
        if not [f for f in case.facts.findings
                if f.target == action.target and f.target_type == "pool" and f.kind == "pool_scale_up"]:
            return "no_finding", (f"no current pool_scale_up finding for pool {action.target}; it is not grown "
                                  "(the steward grows a pool only back to the size its own scale-down planned)")
        return None
    if action.action == "resize_pool":
        oversized = [
            f
            for f in case.facts.findings
            if f.target == action.target and f.target_type == "pool" and f.kind == "oversized"
        ]
        if not oversized:
            return "no_finding", f"no current oversized finding for pool {action.target}; it is not resized"
        return None
    if action.action in NODE_ACTIONS:
        if not [f for f in node_findings(case) if f.kind == "node_health"]:
            return "no_finding", f"no current node_health finding for node {action.target}; it is not cordoned"
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


def level_ceiling_rule(case: Case) -> Denial:
    _, hard_max = case.levels()
    if case.level > hard_max:
        return "level_ceiling", (
            f"{case.action.action} is level {case.level}, above the ceiling {hard_max} for {case.scope()}"
        )
    return None


def finding_approval_reason(case: Case) -> str | None:
    """A stop whose every current finding says a human must approve it (stop_needs_approval): why; else None."""
    if not case.is_stop or case.job is None:
        return None
    kind = case.action.finding_kind
    backing = [f for f in case.facts.findings if f.target == case.action.target and f.target_type == "job"
               and f.kind in STOPPABLE_KINDS and (kind is None or f.kind == kind)]
    if backing and all(f.stop_needs_approval for f in backing):
        return f"a stop on this finding needs a human: {backing[0].stop_needs_approval}"
    return None


def grace_rule(case: Case) -> Denial:
    """A stop while the job's own long-tail grace still runs (every current idle/zombie finding says stop_after is
    later): refused; its warning may have gone out, the stop waits for the grace."""
    if not case.is_stop or case.job is None:
        return None
    kind = case.action.finding_kind
    backing = [f for f in case.facts.findings if f.target == case.action.target and f.target_type == "job"
               and f.kind in STOPPABLE_KINDS and (kind is None or f.kind == kind)]
    held = [as_utc(f.stop_after) for f in backing if f.stop_after is not None and as_utc(f.stop_after) > case.now]
    if backing and len(held) == len(backing):
        return "long_tail_grace", (
            f"job {case.action.target} is quiet, but not yet for long by its own rhythm (long-tail grace); "
            f"no stop before {when(min(held))}"
        )
    return None
