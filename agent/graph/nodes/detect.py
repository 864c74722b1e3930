"""detect: run the detectors on the sweep's reading, attach the best runbook to each finding, audit them."""

from __future__ import annotations

import re
from typing import Any

from agent.detectors.engine import run_detectors
from agent.graph.deps import StewardDeps
from agent.graph.state import StewardState
from core.actions import Finding

_NUMBERS = re.compile(r"\d+(?:[.:]\d+)*")


def detect(deps: StewardDeps, state: StewardState) -> dict[str, Any]:
    obs = deps.observation(state["run_id"])
    findings = run_detectors(obs, deps.policy)
    if deps.runbook_search is not None:
        searched: dict[str, str | None] = {}
        findings = [_with_runbook(deps, f, searched) for f in findings]
    for f in findings:
        deps.audit.record("finding", at=obs.at, run_id=state["run_id"], target=f.target, action=None,
                          status=f.kind, reason=f.evidence,
                          data={"kind": f.kind, "since": f.since.isoformat(), "gpus": f.gpus,
                                "waste_gpu_hours": f.waste_gpu_hours, "waste_cost": f.waste_cost,
                                "runbook": f.runbook})
    return {"findings": [f.model_dump(mode="json") for f in findings]}


def _with_runbook(deps: StewardDeps, f: Finding, searched: dict[str, str | None]) -> Finding:
    # Findings that differ only in their numbers share one search: hundreds of idle jobs, a few queries.
    query = f"{f.kind} {_NUMBERS.sub('#', f.evidence)}"
    if query not in searched:
        try:
            hits = deps.runbook_search(f"{f.kind} {f.evidence}", f.kind, 1)
        except Exception:  # retrieval is advisory; a broken index must not stop a sweep
            hits = []
        searched[query] = hits[0]["id"] if hits else None
    runbook = searched[query]
    return f.model_copy(update={"runbook": runbook}) if runbook else f
