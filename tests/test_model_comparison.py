"""`steward eval --model A --model B`: per-model tables with tool calls and tokens, offline with scripted models."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from agent.config.policy import Policy
from agent.planning.llm_planner import LLMPlanner
from agent.planning.policy_model import PolicyModel
from evals.runner import run_scenario
from evals.table import print_eval_tables
from sim.scenario import parse_scenario
from tests.scripted_model import ScriptedChatModel, tool_call

USAGE = {"input_tokens": 1000, "output_tokens": 50, "total_tokens": 1050}


def _scenario():
    return parse_scenario({
        "version": 1, "name": "one-idle-notebook", "duration": "2h", "step": "60s",
        "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 1, "min_nodes": 1, "price_per_gpu_hour": 4.0,
                   "billing": "reserved"}],
        "jobs": [
            {"id": "ml/notebook", "user": "alice", "gpus": 1, "phases": [{"gpu_util": 0, "gpu_mem_gb": 10}]},
            {"id": "ml/train", "user": "bob", "gpus": 1, "phases": [{"gpu_util": [70, 90], "gpu_mem_gb": 30}]},
        ],
        "truth": [{"job": "ml/notebook", "waste": "idle", "since": "0m"},
                  {"job": "ml/train", "waste": "none", "must_not_kill": True}],
    })


def _per_plan(first_round: list[dict]):
    """A script that answers each new plan with `first_round` tool calls, then with plain text."""

    def play(messages, index):
        if isinstance(messages[-1], HumanMessage):
            return AIMessage(content="", tool_calls=first_round, usage_metadata=USAGE)
        return AIMessage(content="done", usage_metadata=USAGE)

    return play


def test_counted_tool_calls_and_tokens_reach_the_document_and_the_table(capsys):
    careful = ScriptedChatModel(script=_per_plan([
        tool_call("query_gpu_metrics", "q", job="ml/notebook", window_minutes=60),
        tool_call("notify_owner", "n", job="ml/notebook", message="your GPU is idle", finding_kind="idle"),
    ]))
    quiet = ScriptedChatModel(script=_per_plan([]))
    docs = {}
    for name, model in (("careful", careful), ("quiet", quiet)):
        run = run_scenario(_scenario(), Policy(), LLMPlanner(model, name=name))
        docs[name] = [run.document()]
    stats = docs["careful"][0]["stats"]
    plans = len(careful.calls) // 2  # each plan: one round with tools, one with the answer
    assert plans > 0 and stats["planner"] == "careful"
    assert stats["tool_calls"] == 2 * plans
    assert stats["prompt_tokens"] == 1000 * len(careful.calls) and stats["completion_tokens"] == 50 * len(careful.calls)
    assert any(a["action"] == "notify" and a["status"] == "executed" for a in docs["careful"][0]["actions"])
    assert docs["quiet"][0]["stats"]["tool_calls"] == 0
    print_eval_tables(docs)
    out = capsys.readouterr().out
    assert "Planner: careful" in out and "Planner: quiet" in out
    assert f"tool calls/scenario {2 * plans:.1f}" in out


def test_a_model_proposing_nonsense_mutates_nothing():
    nonsense = ScriptedChatModel(script=_per_plan([
        tool_call("terminate_job", "a", job="ml/no-such-job", reason="gone"),
        tool_call("terminate_job", "b", job="ml/train", reason="looks idle to me", force=True),
        tool_call("terminate_job", "c", job="ml/notebook", reason="no warning needed"),
        tool_call("terminate_job", "d", job=["ml/notebook"], reason=7),  # garbage argument types
        tool_call("resize_pool", "e", pool="a100", target_nodes=-3, reason="shrink"),
        tool_call("resize_pool", "f", pool="no-such-pool", target_nodes=0, reason="shrink"),
        tool_call("format_disk", "g", node="a100-0"),
    ]))
    run = run_scenario(_scenario(), Policy(), LLMPlanner(nonsense, name="nonsense"))
    doc = run.document()
    mutations = [a for a in doc["actions"] if a["action"] != "notify" and a["status"] == "executed"]
    # Nothing beyond the floor: exactly what the built-in rules do on their own.
    rules = run_scenario(_scenario(), Policy(), PolicyModel()).document()
    def steps(actions: list[dict]) -> list[tuple]:
        return [(a["job"], a["action"], a["at_s"]) for a in actions if a["action"] != "notify" and a["status"] == "executed"]

    assert steps(mutations) == steps(rules["actions"])
    assert doc["score"]["false_kills"] == 0
    assert doc["stats"]["guardrail_refusals"] > 0
