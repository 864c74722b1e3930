"""Nothing the model sends runs unbounded: the real ChatOpenAI client against the OpenAI loopback server.

A reply's tool calls are capped per turn, oversized arguments are refused, a reply that was cut off (no or a wrong
finish_reason, arguments that are not complete JSON) runs nothing, and an endpoint that is down hands the sweep to
the built-in policy model, saying so in the plan and the report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.tools import StructuredTool

from agent.api.answerer import ChatContext
from agent.api.llm_chat import answer_with_model
from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.graph.service import SweepResult, SweepService
from agent.planning.llm_planner import LLMPlanner, make_chat_model
from agent.wiring import simulated_deps
from sim.scenario import load_scenario
from tests.conftest import free_port
from tests.openai_loopback import OpenAILoopback, Reply, helpers

SCENARIO = Path(__file__).resolve().parents[1] / "evals" / "scenarios" / "idle-notebook.yaml"
IDLE = "ml-team/jupyter-carol"
WARN = {"job": IDLE, "message": "Your notebook has held an idle A100 for 90 minutes; it stops at 12:00.",
        "finding_kind": "idle"}


def settings_for(base_url: str, **extra: Any) -> Settings:
    return Settings(llm_base_url=base_url, llm_model="m", llm_api_key="x", llm_timeout_s=3, **extra)


def sweep(settings: Settings, model: Any = None) -> tuple[Any, SweepResult]:
    """One sweep of idle-notebook at 11:00, the notebook idle for 90 minutes: the LLM planner has one finding."""
    planner = LLMPlanner.from_settings(settings, model)
    deps, cluster = simulated_deps(load_scenario(SCENARIO), Policy(), planner)
    cluster.advance_to(120 * 60)
    return deps, SweepService(deps).sweep()


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_settings_reach_the_planner():
    planner = LLMPlanner.from_settings(settings_for("http://127.0.0.1:1/v1", llm_max_tool_calls_per_turn=5,
                                                    llm_max_tool_args_bytes=100))
    assert (planner.max_tool_calls_per_turn, planner.max_tool_args_bytes) == (5, 100)
    assert (Settings().llm_max_tool_calls_per_turn, Settings().llm_max_tool_args_bytes) == (20, 8192)


def test_tool_calls_past_the_per_turn_cap_are_refused_and_answered():
    with OpenAILoopback(helpers.many_tool_calls(3000, "notify_owner", WARN, text="warned")) as srv:
        deps, run = sweep(settings_for(srv.base_url))
    plan = run.state["plan"]
    assert plan["tool_calls"] == 20
    assert "refused 2980 tool call(s): the reply had 3000 tool calls and at most 20 run per turn" in plan["errors"]
    answers = tool_messages(srv.requests[1])
    assert len(answers) == 3000  # every call id is answered: the conversation stays valid
    assert sum("was not run" in a for a in answers) == 2980
    proposals = deps.audit.entries(kind="proposal", limit=5000)
    assert 1 <= len(proposals) <= 20
    assert "refused 2980 tool call(s)" in run.report


def test_oversized_arguments_are_refused_with_the_bound_named():
    huge = {**WARN, "message": "x" * 10_000}
    script = helpers.tool_calls_then_text([("notify_owner", huge), ("list_jobs", {"only_with_findings": True})])
    with OpenAILoopback(script) as srv:
        deps, run = sweep(settings_for(srv.base_url))
    first, second = tool_messages(srv.requests[1])
    assert "notify_owner was not run" in first and "8192-byte bound" in first
    assert "was not run" not in second and IDLE in second  # the small call still ran
    assert run.state["plan"]["tool_calls"] == 1
    assert not [p for p in deps.audit.entries(kind="proposal", limit=100) if "x" * 100 in (p.reason or "")]
    assert all(len(m.body) < 10_000 for m in deps.notifier.sent)


def model_proposals(deps) -> list:
    return [e for e in deps.audit.entries(kind="proposal", limit=100) if e.data.get("proposed_by") != "policy-model"]


def test_a_reply_cut_off_by_length_runs_nothing():
    script = lambda body, i: Reply(tool_calls=[("notify_owner", WARN)], finish_reason="length") if i == 0 \
        else Reply(text="stopping here")  # noqa: E731
    with OpenAILoopback(script) as srv:
        deps, run = sweep(settings_for(srv.base_url))
    assert "was not run: the reply ended with finish_reason 'length'" in tool_messages(srv.requests[1])[0]
    assert run.state["plan"]["tool_calls"] == 0
    assert model_proposals(deps) == []  # the rules' own steps (the floor) may be there; none of the model's


def test_planner_refuses_a_streamed_call_repaired_from_truncated_arguments():
    """Under LangGraph's message streaming the planner's invoke streams; a stream cut mid-arguments arrives as a
    call with the partial message, and only the missing finish_reason shows it."""
    script = lambda body, i: Reply(tool_calls=[("notify_owner", WARN)], cut_after=12) if i == 0 \
        else Reply(text="cut off")  # noqa: E731
    with OpenAILoopback(script) as srv:
        settings = settings_for(srv.base_url)
        model = make_chat_model(settings)
        model.streaming = True  # type: ignore[attr-defined]
        deps, run = sweep(settings, model)
    assert srv.requests[0]["stream"] is True
    assert "without a finish_reason" in tool_messages(srv.requests[1])[0]
    assert run.state["plan"]["tool_calls"] == 0
    assert model_proposals(deps) == []  # the rules' own steps (the floor) may be there; none of the model's


def _chat_context() -> tuple[ChatContext, list[dict[str, Any]]]:
    ran: list[dict[str, Any]] = []

    def drain_node(node: str, force: bool = False) -> dict:
        """Drain a node."""
        ran.append({"node": node, "force": force})
        return {"status": "ok", "message": f"drained {node}"}

    deps, _ = simulated_deps(load_scenario(SCENARIO), Policy(), None)  # type: ignore[arg-type]
    obs = deps.observe()
    tool = StructuredTool.from_function(drain_node)
    return ChatContext(findings=[], observation=obs, tools={tool.name: tool}, audit=deps.audit, pending=[],
                       now=obs.at, currency="USD"), ran


def _chat(srv: OpenAILoopback) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ctx, ran = _chat_context()
    model = make_chat_model(settings_for(srv.base_url))
    return list(answer_with_model(model, ctx, "drain gpu-node-7", "en")), ran


def test_chat_does_not_run_a_tool_call_from_a_truncated_stream():
    args = json.dumps({"node": "gpu-node-7", "force": True})
    script = lambda body, i: Reply(tool_calls=[("drain_node", args)], cut_after=5) if i == 0 \
        else Reply(text="The reply was cut off; nothing was drained.")  # noqa: E731
    with OpenAILoopback(script) as srv:
        events, ran = _chat(srv)
    assert ran == []  # today: drain_node(node="gpu-node-7") ran from the repaired half of the arguments
    refused = [e for e in events if e["type"] == "tool_result"]
    assert refused == [{"type": "tool_result", "name": "drain_node", "status": "error",
                        "summary": "the reply ended without a finish_reason; only complete JSON arguments are executed"}]
    assert "drain_node was not run" in tool_messages(srv.requests[1])[0]
    assert events[-1]["answer"] == "The reply was cut off; nothing was drained."


def test_chat_caps_calls_and_argument_size():
    calls = [("drain_node", {"node": "n" * 9000})] + [("drain_node", {"node": f"n{i}"}) for i in range(30)]
    script = lambda body, i: Reply(tool_calls=calls, chunk_size=1024) if i == 0 else Reply(text="done")  # noqa: E731
    with OpenAILoopback(script) as srv:
        events, ran = _chat(srv)
    assert [r["node"] for r in ran] == [f"n{i}" for i in range(19)]
    answers = tool_messages(srv.requests[1])
    assert len(answers) == 31 and "8192-byte bound" in answers[0]
    assert sum("at most 20 run per turn" in a for a in answers) == 11


def test_endpoint_down_falls_back_to_the_policy_model_and_says_so():
    deps, run = sweep(settings_for(f"http://127.0.0.1:{free_port()}/v1"))
    plan = run.state["plan"]
    assert plan["degraded"].startswith("model unavailable: ") and "ConnectionError" in plan["degraded"]
    assert plan["degraded"].endswith("; planned by the policy model")
    assert [(p["action"], p["target"], p["proposed_by"]) for p in run.state["proposals"]] == \
        [("notify", IDLE, "policy-model")]
    assert [m.job_id for m in deps.notifier.sent] == [IDLE]  # the idle job still gets its warning
    assert f"! {plan['degraded']}" in run.report


def test_endpoint_5xx_falls_back_too():
    with OpenAILoopback(helpers.http_error(503)) as srv:
        deps, run = sweep(settings_for(srv.base_url))
    assert run.state["plan"]["degraded"].startswith("model unavailable: ") and "503" in run.state["plan"]["degraded"]
    assert [m.job_id for m in deps.notifier.sent] == [IDLE]
