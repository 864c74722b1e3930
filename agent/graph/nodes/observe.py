"""observe: read the whole cluster once per sweep (a fixed handful of backend calls) and keep the reading.

First it settles actions a stopped process left without an outcome (agent/graph/execute.py). A backend that
cannot be read leaves the sweep with an empty reading marked degraded, naming the backend: nothing is judged
or done on it, and the report and the audit say why.
"""

from __future__ import annotations

from typing import Any

from agent.graph.deps import BackendUnavailable, StewardDeps, brief_error
from agent.graph.execute import settle_interrupted
from agent.graph.state import StewardState


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
        "logs_read": len(obs.logs), "backend_calls": obs.backend_calls, "degraded": list(obs.degraded)}}
    if recovered:
        update["recovered"] = [o.model_dump(mode="json") for o in recovered]
    return update
