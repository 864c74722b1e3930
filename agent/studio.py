"""Entry point for LangGraph's dev server and Studio (`langgraph dev`, see langgraph.json)."""

from __future__ import annotations

from typing import Any

from agent.config.policy import load_policy
from agent.config.settings import Settings
from agent.graph.builder import build_graph
from agent.wiring import make_planner, simulated_deps
from sim.scenario import demo_scenario_path, load_scenario


def make_graph(config: Any = None) -> Any:
    """The graph against the configured (default: demo) simulated cluster; the server brings the checkpointer."""
    settings = Settings()
    scenario = load_scenario(settings.scenario or demo_scenario_path())
    deps, cluster = simulated_deps(scenario, load_policy(settings.policy_file), make_planner(settings))
    cluster.advance_to(scenario.duration / 2)
    return build_graph(deps)
