"""The import layers hold (tests/layering.py), and the check does fail on a wrong import."""

from __future__ import annotations

from tests.layering import check, violations


def test_the_source_tree_keeps_its_layers():
    assert check() == []


def test_a_guardrail_that_imports_a_surface_or_does_io_is_caught():
    assert violations("from agent.api.routes import router\n", "agent.guardrail.decide")
    assert violations("import sqlite3\n", "agent.guardrail.case")
    assert violations("from agent.planning.policy_model import PolicyModel\n", "agent.guardrail.target_rules")


def test_tools_and_sim_never_reach_up():
    assert violations("from agent.graph.deps import StewardDeps\n", "tools.kubernetes")
    assert violations("from agent.api.build import sim_runtime\n", "sim.cluster")
    assert violations("from sim.cluster import SimCluster\n", "agent.graph.execute")  # only the demo wiring
    assert not violations("from sim.cluster import SimCluster\n", "agent.wiring")


def test_lower_layers_do_not_import_higher_ones():
    assert violations("from agent.graph.service import SweepService\n", "agent.records.audit")
    assert violations("from agent.graph.builder import build_graph\n", "agent.planning.llm_planner")
    assert violations("from agent.cli.main import main\n", "agent.graph.builder")
    assert violations("import agent.detectors.engine\n", "core.actions")
    # typing-only imports are annotations, not dependencies
    assert not violations("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agent.graph.deps import X\n",
                          "agent.planning.llm_planner")
