"""Runs sweeps and approval threads on the graph; the one place that starts graph runs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph.types import Command

from agent.graph.builder import build_graph
from agent.graph.deps import StewardDeps
from agent.records.approvals import Approval, ApprovalError
from core.actions import GuardedAction


@dataclass
class SweepResult:
    run_id: str
    report: str
    state: dict[str, Any]
    approvals: list[Approval] = field(default_factory=list)


class SweepService:
    def __init__(self, deps: StewardDeps, checkpointer: Any = None, *, run_prefix: str = "sweep") -> None:
        if checkpointer is None:
            from langgraph.checkpoint.memory import InMemorySaver

            checkpointer = InMemorySaver()
        self.deps = deps
        self.graph = build_graph(deps, checkpointer=checkpointer)
        self.run_prefix = run_prefix
        self._seq = itertools.count(1)

    def _config(self, thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}, "recursion_limit": 50}

    def sweep(self, trigger: str = "cli") -> SweepResult:
        """One sweep; actions that need a human each get an approval thread, left waiting."""
        self.expire_due()
        now = self.deps.clock.now()
        run_id = f"{self.run_prefix}-{now:%Y%m%dT%H%M%S}-{next(self._seq)}"
        state = self.graph.invoke({"mode": "sweep", "run_id": run_id, "trigger": trigger}, self._config(run_id))
        opened = [self._open_approval(GuardedAction.model_validate(raw), run_id)
                  for raw in state.get("approval_requests", [])]
        return SweepResult(run_id=run_id, report=state.get("report", ""), state=state, approvals=opened)

    def _open_approval(self, ga: GuardedAction, run_id: str) -> Approval:
        deps = self.deps
        approval = deps.approvals.request(
            proposal_key=ga.proposal.key(), target=ga.proposal.target, action=ga.proposal.action,
            level=ga.decision.level, now=deps.clock.now(), expire_after_s=deps.policy.approvals.expire_after,
            payload={"guarded_action": ga.model_dump(mode="json"), "run_id": run_id}, run_id=run_id,
            escalation=deps.policy.approvals.escalation,
        )
        config = self._config(approval.id)
        if not self.graph.get_state(config).next:  # a new request: start its thread, which waits at interrupt()
            self.graph.invoke({"mode": "approval", "run_id": approval.id, "approval": {"id": approval.id},
                               "approval_requests": [ga.model_dump(mode="json")]}, config)
        return approval

    def answer(self, approval_id: str, decision: Literal["approve", "deny"], by: str, reason: str = "") -> SweepResult:
        """Take a human answer exactly once and resume the waiting graph with it."""
        now = self.deps.clock.now()
        self.deps.approvals.answer(approval_id, decision=decision, by=by, reason=reason, now=now, run_id=approval_id)
        return self._resume(approval_id, {"decision": decision, "by": by, "reason": reason})

    def _resume(self, approval_id: str, value: dict[str, Any]) -> SweepResult:
        config = self._config(approval_id)
        if not self.graph.get_state(config).next:
            raise ApprovalError(f"approval {approval_id} has no waiting graph run")
        state = self.graph.invoke(Command(resume=value), config)
        return SweepResult(run_id=approval_id, report=state.get("report", ""), state=state)

    def expire_due(self) -> list[SweepResult]:
        """Silence is never approval: overdue requests are closed as expired and nothing is done."""
        results = []
        for item in self.deps.approvals.expire_due(self.deps.clock.now(), run_id="expiry"):
            try:
                results.append(self._resume(item.id, {"decision": "expire", "by": None, "reason": "expired"}))
            except ApprovalError:
                continue
        return results
