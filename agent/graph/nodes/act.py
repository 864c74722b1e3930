"""execute (node): carry out every allowed action of the step through `agent.graph.execute.execute_action`."""

from __future__ import annotations

from typing import Any

from agent.graph.deps import StewardDeps
from agent.graph.execute import execute_action, remember_outcome
from agent.graph.state import StewardState, findings_of
from core.actions import Finding, GuardedAction


def act(deps: StewardDeps, state: StewardState) -> dict[str, Any]:
    run_id = state["run_id"]
    outcomes = []
    # One history for the whole step, kept current, so limits hold within a sweep without re-reading the log.
    history = deps.audit.history(deps.clock.now(), denials_for=deps.policy.approvals.denials_lookback())
    todo: list[tuple[GuardedAction, list[Finding] | None]]
    if state.get("mode") == "approval":
        by = state.get("approval", {}).get("by") or "approver"
        todo = [(GuardedAction.model_validate(raw), None) for raw in state.get("approval_requests", [])]
    else:
        findings = findings_of(state)
        todo = [(ga, findings) for ga in map(GuardedAction.model_validate, state.get("decisions", []))
                if ga.decision.verdict == "allow"]
        by = None
    for ga, run_findings in todo:
        out = execute_action(deps, ga, run_id, run_findings=run_findings, approved_by=by, history=history)
        remember_outcome(history, out, ga.proposal.finding_kind)
        outcomes.append(out)
    return {"outcomes": [o.model_dump(mode="json") for o in outcomes]}
