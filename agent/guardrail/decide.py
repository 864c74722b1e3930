"""The guardrail: a pure function of (proposed action, fresh facts, policy, history) -> decision.

Nothing here reads a clock, a file or the network. Rules run in a fixed order and the
first that decides wins; `approved=True` only satisfies the last one (human approval).
The rules live in guardrail_scope.py (the target) and guardrail_limits.py (time and limits).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from agent.config.policy import Policy
from agent.guardrail.case import Case, Denial, Facts
from agent.guardrail.limit_rules import (
    circuit_breaker_rule,
    denial_hold_rule,
    duplicate_rule,
    finding_size_rule,
    graceful_first_rule,
    rate_limit_rule,
    reserve_gpus,
    reserve_rule,
    stretch_began,
    warning_first_rule,
)
from agent.guardrail.protection import as_utc, protection_reason, when
from agent.guardrail.target_rules import (
    finding_approval_reason,
    grace_rule,
    level_ceiling_rule,
    mode_rule,
    no_finding_rule,
    not_running_rule,
    protected_rule,
    stale_metrics_rule,
    unknown_target_rule,
)
from core.actions import ACTION_LEVELS, Decision, History, ProposedAction

__all__ = ["Facts", "decide", "protection_reason", "reserve_gpus"]

_CHECKS: tuple[Callable[[Case], Denial], ...] = (
    mode_rule,
    unknown_target_rule,
    not_running_rule,
    protected_rule,
    stale_metrics_rule,
    no_finding_rule,
    grace_rule,
    level_ceiling_rule,
    denial_hold_rule,
    warning_first_rule,
    graceful_first_rule,
    duplicate_rule,
    rate_limit_rule,
    circuit_breaker_rule,
    reserve_rule,
    finding_size_rule,
)


def _approval_needed(case: Case) -> str | None:
    why = finding_approval_reason(case)
    if why:
        return why
    max_auto, _ = case.levels()
    if case.level > max_auto:
        return f"{case.action.action} is level {case.level}, above the automatic limit {max_auto} for {case.scope()}"
    if case.level in case.policy.levels.require_approval:
        return f"the policy requires approval for level {case.level} ({case.action.action})"
    return None


def decide(
    action: ProposedAction, facts: Facts, policy: Policy, history: History, *, approved: bool = False,
    asked_at: datetime | None = None,
) -> Decision:
    """Allow, deny or ask a human about `action`; the first rule that decides wins. `asked_at`: when the approval
    being carried out was asked for; a stop approved about an earlier stretch of waste (the job worked since) is
    refused, since the human judged evidence that no longer holds."""
    level = ACTION_LEVELS[action.action]
    try:
        case = Case(action, facts, policy, history, as_utc(facts.now))
        level = case.level
        for check in _CHECKS:
            denial = check(case)
            if denial is not None:
                return Decision(verdict="deny", rule=denial[0], reason=denial[1], level=level)
        ask = _approval_needed(case)
        began = stretch_began(case) if approved and asked_at is not None and case.is_stop else None
        if began is not None and asked_at is not None and as_utc(asked_at) < began:
            return Decision(verdict="deny", rule="approval_stale", level=level, reason=(
                f"the approval was asked at {when(asked_at)}, before the current stretch of waste began at "
                f"{when(began)} (the job worked in between): the human judged evidence that no longer holds, "
                f"so this stop needs a new request"))
        dry_run = policy.mode == "dry_run"
        if ask and not approved and dry_run:
            # Nothing a dry run decides is carried out, so no approver is asked to judge it: the record says a human
            # would have been, and why (approvers who are asked about actions that never run learn to ignore asks).
            return Decision(verdict="allow", rule="approval", level=level, dry_run=True, reason=(
                f"dry run, not executed: {action.action} on {case.target} at level {level} would wait for a "
                f"human ({ask}); no approver is asked in a dry run"))
        if ask and not approved:
            return Decision(
                verdict="needs_approval", rule="approval", reason=f"{ask}; waiting for a human", level=level
            )
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
