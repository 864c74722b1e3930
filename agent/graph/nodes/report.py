"""report: render the sweep report for people (en/zh) and audit it."""

from __future__ import annotations

from typing import Any

from agent.graph.deps import StewardDeps
from agent.graph.report import render_report
from agent.graph.state import StewardState


def report(deps: StewardDeps, state: StewardState) -> dict[str, Any]:
    text = render_report(state, deps)
    deps.audit.record("report", at=deps.clock.now(), run_id=state["run_id"], status=state.get("mode", "sweep"),
                      reason=text[:2000])
    return {"report": text}
