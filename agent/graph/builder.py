"""The LangGraph state machine: observe -> detect -> plan -> guard -> approve -> execute -> report.

A sweep runs in its own thread. An action that needs a human runs in a thread of its
own (mode "approval", thread id = the approval's opaque id) that stops at `interrupt()`
and is resumed exactly once with `Command(resume=...)`; the approved action is executed
as it was decided, never re-planned. Each node is one module in `agent/graph/nodes/`.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.graph import END, START, StateGraph

from agent.graph.deps import StewardDeps
from agent.graph.nodes.act import act
from agent.graph.nodes.approve import approve
from agent.graph.nodes.detect import detect
from agent.graph.nodes.guard import guard
from agent.graph.nodes.observe import observe
from agent.graph.nodes.plan import plan
from agent.graph.nodes.report import report
from agent.graph.state import StewardState


def build_graph(deps: StewardDeps, checkpointer: Any = None):  # noqa: ANN201 - CompiledStateGraph
    """Wire the nodes around `deps`; nothing is created at import time."""

    def route_start(state: StewardState) -> Literal["observe", "approval"]:
        return "approval" if state.get("mode") == "approval" else "observe"

    graph = StateGraph(StewardState)
    # Node names are part of the checkpoints (LangGraph resumes by name): keep them.
    graph.add_node("observe", lambda s: observe(deps, s))
    graph.add_node("detect", lambda s: detect(deps, s))
    graph.add_node("plan", lambda s: plan(deps, s))
    graph.add_node("guardrail", lambda s: guard(deps, s), destinations=("execute", "report"))
    graph.add_node("approval", lambda s: approve(deps, s), destinations=("execute", "report"))
    graph.add_node("execute", lambda s: act(deps, s))
    graph.add_node("report", lambda s: report(deps, s))
    graph.add_conditional_edges(START, route_start)
    graph.add_edge("observe", "detect")
    graph.add_edge("detect", "plan")
    graph.add_edge("plan", "guardrail")
    graph.add_edge("execute", "report")
    graph.add_edge("report", END)
    return graph.compile(checkpointer=checkpointer)
