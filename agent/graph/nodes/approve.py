"""approve: an action that needs a human waits at `interrupt()` in its own thread; resumed exactly once."""

from __future__ import annotations

from typing import Literal

from langgraph.types import Command, interrupt

from agent.graph.deps import StewardDeps
from agent.graph.state import StewardState
from core.actions import ActionOutcome, GuardedAction


def approve(deps: StewardDeps, state: StewardState) -> Command[Literal["execute", "report"]]:
    request = state["approval_requests"][0]
    answer = interrupt({"approval_id": state["approval"]["id"], "action": request["proposal"],
                        "decision": request["decision"]})
    if not isinstance(answer, dict) or answer.get("decision") not in ("approve", "deny", "expire"):
        raise ValueError(f"approval resume value must be {{'decision': approve|deny|expire}}, got {answer!r}")
    update = {"approval": {**state["approval"], **answer}}
    if answer["decision"] == "approve":
        return Command(goto="execute", update=update)
    ga = GuardedAction.model_validate(request)
    status = "denied_by_human" if answer["decision"] == "deny" else "expired"
    out = ActionOutcome(id=ga.id, action=ga.proposal.action, target=ga.proposal.target, level=ga.decision.level,
                        status=status, at=deps.clock.now(), reason=str(answer.get("reason") or status),
                        approved_by=None)
    return Command(goto="report", update={**update, "outcomes": [out.model_dump(mode="json")]})
