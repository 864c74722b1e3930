"""plan: the planner (an LLM with read-only tools, or the built-in policy model) proposes actions; audited."""

from __future__ import annotations

from typing import Any

from agent.graph.deps import StewardDeps
from agent.graph.state import StewardState, findings_of


def plan(deps: StewardDeps, state: StewardState) -> dict[str, Any]:
    obs = deps.observation(state["run_id"])
    history = deps.audit.history(obs.at, denials_for=deps.policy.approvals.denials_lookback())
    result = deps.planner.plan(findings_of(state), obs, history, deps)
    for p in result.proposals:
        deps.audit.record("proposal", at=obs.at, run_id=state["run_id"], target=p.target, action=p.action,
                          level=p.level, status="proposed", reason=p.reason,
                          data={"proposed_by": p.proposed_by, "finding_kind": p.finding_kind,
                                "target_nodes": p.target_nodes})
    summary = result.model_dump(mode="json", exclude={"proposals"})
    return {"plan": summary, "proposals": [p.model_dump(mode="json") for p in result.proposals]}
