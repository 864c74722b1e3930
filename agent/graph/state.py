"""The graph's state: plain JSON-able dicts with explicit reducers, so checkpoints stay portable."""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, TypedDict

from core.actions import Finding


class StewardState(TypedDict, total=False):
    mode: Literal["sweep", "approval"]
    run_id: str
    trigger: str  # schedule | cli | chat | alert | eval
    at: str  # cluster time of the observation (ISO 8601)
    observed: dict[str, Any]  # summary only; raw samples are not checkpointed
    findings: list[dict[str, Any]]  # Finding.model_dump(mode="json")
    plan: dict[str, Any]  # PlanResult without proposals
    proposals: list[dict[str, Any]]
    decisions: list[dict[str, Any]]  # GuardedAction dumps, this run
    approval_requests: list[dict[str, Any]]  # GuardedAction dumps that need a human
    approval: dict[str, Any]  # approval mode: the answer taken
    outcomes: Annotated[list[dict[str, Any]], operator.add]  # ActionOutcome dumps
    recovered: list[dict[str, Any]]  # ActionOutcome dumps: actions an earlier, interrupted process left unsettled
    report: str
    changes: dict[str, Any]  # change governance this sweep: ids recorded, detected and flagged (docs/changes.md)


def findings_of(state: StewardState) -> list[Finding]:
    """The run's findings, as records again (the state keeps them as JSON)."""
    return [Finding.model_validate(f) for f in state.get("findings", [])]
