"""plan: the planner (an LLM with read-only tools, or the built-in policy model) proposes actions; audited."""

from __future__ import annotations

from typing import Any

from agent.graph.deps import StewardDeps
from agent.graph.state import StewardState, findings_of
from core.actions import History, ProposedAction
from core.observation import Observation
from core.pool_plans import open_scale_down, scale_up_uid


def plan(deps: StewardDeps, state: StewardState) -> dict[str, Any]:
    obs = deps.observation(state["run_id"])
    history = deps.audit.history(obs.at, denials_for=deps.policy.approvals.denials_lookback())
    result = deps.planner.plan(findings_of(state), obs, history, deps)
    result.proposals = [_as_scale_up(p, obs, history) for p in result.proposals]
    for p in result.proposals:
        deps.audit.record("proposal", at=obs.at, run_id=state["run_id"], target=p.target, action=p.action,
                          level=p.level, status="proposed", reason=p.reason,
                          data={"proposed_by": p.proposed_by, "finding_kind": p.finding_kind,
                                "target_nodes": p.target_nodes})
    summary = result.model_dump(mode="json", exclude={"proposals"})
    return {"plan": summary, "proposals": [p.model_dump(mode="json") for p in result.proposals]}


def _as_scale_up(p: ProposedAction, obs: Observation, history: History) -> ProposedAction:
    """A model's resize that grows a pool names no scale-down: give it the open one's identity (docs/forecast.md),
    so it is keyed like the policy model's; the guardrail still checks every part of it."""
    pool = next((x for x in obs.pools if x.name == p.target), None)
    if p.action != "resize_pool" or pool is None or p.target_nodes is None or p.target_nodes <= pool.nodes:
        return p
    down = open_scale_down(history, p.target)
    if down is None or p.target_uid:
        return p
    return p.model_copy(update={"target_uid": scale_up_uid(down), "finding_kind": "pool_scale_up"})
