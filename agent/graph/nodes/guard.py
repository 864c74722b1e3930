"""guard: the deterministic guardrail decides every proposal (allow / deny / needs a human); audited.

This node only calls `agent.guardrail.decide` and the runbook limit; what is allowed is decided there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from langgraph.types import Command

from agent.graph.deps import StewardDeps
from agent.graph.execute import fresh_facts
from agent.graph.state import StewardState, findings_of
from agent.guardrail.decide import decide
from agent.guardrail.runbook_limits import limit_by_runbook
from core.actions import GuardedAction, ProposedAction


def guard(deps: StewardDeps, state: StewardState) -> Command[Literal["execute", "report"]]:
    run_id = state["run_id"]
    findings = findings_of(state)
    now = datetime.fromisoformat(state["at"])
    history = deps.audit.history(now, denials_for=deps.policy.approvals.denials_lookback())
    decided: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    for raw in state.get("proposals", []):
        proposal = ProposedAction.model_validate(raw)
        facts = fresh_facts(deps, run_id, proposal.target, findings, reread_job=False)
        decision = limit_by_runbook(decide(proposal, facts, deps.policy, history), proposal, findings,
                                    deps.runbook_max_level)
        ga = GuardedAction(id=f"{run_id}:{proposal.key()}", proposal=proposal, decision=decision, decided_at=now)
        deps.audit.record("decision", at=now, run_id=run_id, target=proposal.target, action=proposal.action,
                          level=decision.level, status=decision.verdict, reason=decision.reason,
                          data={"rule": decision.rule, "dry_run": decision.dry_run, "action_id": ga.id,
                                "proposed_by": proposal.proposed_by})
        (waiting if decision.verdict == "needs_approval" else decided).append(ga.model_dump(mode="json"))
    goto: Literal["execute", "report"] = (
        "execute" if any(d["decision"]["verdict"] == "allow" for d in decided) else "report"
    )
    return Command(goto=goto, update={"decisions": decided + waiting, "approval_requests": waiting})
