"""observe: read the whole cluster once per sweep (a fixed handful of backend calls) and keep the reading."""

from __future__ import annotations

from typing import Any

from agent.graph.deps import StewardDeps
from agent.graph.state import StewardState


def observe(deps: StewardDeps, state: StewardState) -> dict[str, Any]:
    obs = deps.observe()
    deps.remember(state["run_id"], obs)
    return {"at": obs.at.isoformat(), "observed": {
        "jobs": len(obs.jobs), "gpus": len(obs.gpus), "nodes": len(obs.nodes), "pools": len(obs.pools),
        "logs_read": len(obs.logs), "backend_calls": obs.backend_calls}}
