"""A runbook's "may do automatically" level, applied after the guardrail: it can only lower what is allowed."""

from __future__ import annotations

from collections.abc import Callable

from core.actions import Decision, Finding, ProposedAction

RULE = "runbook_limit"


def runbook_for(proposal: ProposedAction, findings: list[Finding]) -> str | None:
    """The runbook of the finding the proposal acts on (same target, and same kind when the proposal names one)."""
    for f in findings:
        if f.target == proposal.target and f.runbook and proposal.finding_kind in (None, f.kind):
            return f.runbook
    return None


def limit_by_runbook(decision: Decision, proposal: ProposedAction, findings: list[Finding],
                     max_level_of: Callable[[str | None], int | None] | None,
                     proposes: frozenset[str] = frozenset()) -> Decision:
    """Deny an allowed or approval-bound action above its runbook's max_level; anything else passes unchanged.

    `proposes`: actions the runbook proposes to a human (its front matter's `proposes`); above the ceiling such
    an action always waits for a human, never runs on its own. Pure given `max_level_of`: a deny stays a deny,
    an unknown runbook or a missing lookup changes nothing, so a runbook can never make the guardrail more
    permissive.
    """
    if decision.verdict == "deny" or max_level_of is None:
        return decision
    runbook = runbook_for(proposal, findings)
    ceiling = max_level_of(runbook) if runbook else None
    if ceiling is None or decision.level <= ceiling:
        return decision
    if proposal.action in proposes:
        return decision.model_copy(update={
            "verdict": "needs_approval", "rule": RULE,
            "reason": f"runbook {runbook} proposes {proposal.action} (level {decision.level}) for a human to decide; "
                      f"the agent acts on its own up to level {ceiling}; waiting for a human"})
    return decision.model_copy(update={
        "verdict": "deny", "rule": RULE,
        "reason": f"runbook {runbook} lets the agent act up to level {ceiling} on its own; "
                  f"{proposal.action} is level {decision.level} (guardrail said {decision.verdict}: {decision.reason})",
    })
