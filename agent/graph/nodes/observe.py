"""observe: read the whole cluster once per sweep (a fixed handful of backend calls) and keep the reading.

First it settles actions a stopped process left without an outcome (agent/graph/execute.py). A backend that
cannot be read leaves the sweep with an empty reading marked degraded, naming the backend: nothing is judged
or done on it, and the report and the audit say why.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from agent.graph.deps import BackendUnavailable, StewardDeps, brief_error
from agent.graph.execute import settle_interrupted
from agent.graph.state import StewardState
from agent.records.change_impact import watch
from core.observation import Observation

log = logging.getLogger("steward.observe")
FAILED_LOOKBACK = timedelta(hours=6)  # failed jobs read at each sweep (each recorded once by its uid)


def observe(deps: StewardDeps, state: StewardState) -> dict[str, Any]:
    run_id = state["run_id"]
    recovered = settle_interrupted(deps, run_id)
    try:
        obs = deps.observe()
    except Exception as exc:  # a backend is down, slow or answered nonsense: degraded, not dead
        reason = str(exc) if isinstance(exc, BackendUnavailable) else brief_error(exc)
        obs = deps.unread(f"cluster not read: {reason}")
        deps.audit.record("error", at=obs.at, run_id=run_id, status="observe_failed", reason=obs.degraded[0])
    deps.remember(run_id, obs)
    update: dict[str, Any] = {"at": obs.at.isoformat(), "observed": {
        "jobs": len(obs.jobs), "gpus": len(obs.gpus), "nodes": len(obs.nodes), "pools": len(obs.pools),
        "logs_read": len(obs.logs), "backend_calls": obs.backend_calls, "degraded": list(obs.degraded),
        "notes": list(obs.notes)}}
    if deps.changes is not None and (obs.jobs or obs.nodes):
        update["changes"] = _changes(deps, obs, run_id)
    if recovered:
        update["recovered"] = [o.model_dump(mode="json") for o in recovered]
    return update


def _changes(deps: StewardDeps, obs: Observation, run_id: str) -> dict[str, Any]:
    """Change governance for this reading (agent/records/change_impact.py); a failure never stops the sweep."""
    try:
        failed_jobs = getattr(deps.scheduler, "failed_jobs", None)  # optional: one call, where the backend has it
        failed = failed_jobs(obs.at - FAILED_LOOKBACK) if callable(failed_jobs) else []
        scripted = getattr(deps.scheduler, "scripted_changes", None)  # the simulator's scenario `changes:`
        people = scripted(obs.at - FAILED_LOOKBACK) if callable(scripted) else []
        return watch(deps.changes, deps.audit, obs, deps.policy, run_id, failed=failed, people=people)
    except Exception as exc:
        log.warning("change governance skipped this sweep: %s", brief_error(exc))
        return {"error": brief_error(exc)}
