"""langgraph.json points LangGraph's dev server and Studio at a factory that builds the real graph."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_langgraph_json_names_a_factory_that_builds_the_graph(tmp_path, monkeypatch):
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path))
    config = json.loads((ROOT / "langgraph.json").read_text())
    path, _, attr = config["graphs"]["steward"].partition(":")
    module = importlib.import_module(path.removeprefix("./").removesuffix(".py").replace("/", "."))
    graph = getattr(module, attr)()
    nodes = set(graph.get_graph().nodes)
    assert {"observe", "detect", "plan", "guardrail", "approval", "execute", "report"} <= nodes
    state = graph.invoke({"mode": "sweep", "run_id": "studio-test"})
    assert state["findings"] and state["report"].startswith("GPU Steward sweep")
