"""The LLM planner calls the model only when there is something new to decide (agent/planning/plan_cache.py)."""

from __future__ import annotations

from datetime import timedelta

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from agent.config.policy import Policy
from agent.planning.llm_planner import LLMPlanner
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.actions import Finding
from evals.runner import run_scenario
from sim.scenario import parse_scenario
from tests.scripted_model import ScriptedChatModel, tool_call

USAGE = {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940}


def _scenario(name: str = "idle-notebook"):
    return parse_scenario({
        "version": 1, "name": name, "duration": "3h", "step": "60s",
        "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 1, "min_nodes": 1, "price_per_gpu_hour": 4.0,
                   "billing": "reserved"}],
        "jobs": [
            {"id": "ml/notebook", "user": "alice", "gpus": 1, "phases": [{"gpu_util": 0, "gpu_mem_gb": 10}]},
            {"id": "ml/train", "user": "bob", "gpus": 1, "phases": [{"gpu_util": [70, 90], "gpu_mem_gb": 30}]},
        ],
        "truth": [{"job": "ml/notebook", "waste": "idle", "since": "0m"},
                  {"job": "ml/train", "waste": "none", "must_not_kill": True}],
    })


def _eager(messages, index):
    """Asked about a plan, proposes a warning and a stop at once (the guardrail holds the stop back until the
    notice has run out); after the tool results, a short answer."""
    if isinstance(messages[-1], HumanMessage):
        return AIMessage(content="", usage_metadata=USAGE, tool_calls=[
            tool_call("notify_owner", f"n{index}", job="ml/notebook", message="idle GPU", finding_kind="idle"),
            tool_call("terminate_job", f"t{index}", job="ml/notebook", reason="idle"),
        ])
    return AIMessage(content="warned, stop proposed", usage_metadata=USAGE)


def test_sweeps_with_nothing_new_make_no_model_call_and_the_job_is_still_warned_then_stopped():
    model = ScriptedChatModel(script=_eager)
    run = run_scenario(_scenario(), Policy(), LLMPlanner(model, name="eager"))
    doc = run.document()
    stats = doc["stats"]
    asked = [m for m in model.calls if isinstance(m[-1], HumanMessage)]
    # Asked at the first finding, after the warning went out, and once the notice ran out: not every sweep.
    assert len(asked) == 3, [str(m[-1].content)[:80] for m in asked]
    assert stats["model_calls"] == len(model.calls) == 2 * len(asked)
    assert stats["cached_findings"] > 0
    assert stats["prompt_tokens"] == 900 * len(model.calls)
    assert stats["latency_p50_s"] is not None and stats["latency_p95_s"] >= stats["latency_p50_s"]
    executed = [(a["action"], a["at_s"]) for a in doc["actions"] if a["job"] == "ml/notebook"
                and a["status"] == "executed"]
    assert [a for a, _ in executed] == ["notify", "terminate"]
    assert executed[1][1] - executed[0][1] >= Policy().warning.min_notice
    assert doc["score"]["false_kills"] == 0


def test_every_cluster_has_its_own_cache():
    model = ScriptedChatModel(script=_eager)
    planner = LLMPlanner(model, name="eager")
    first = run_scenario(_scenario("a"), Policy(), planner).document()["stats"]["model_calls"]
    second = run_scenario(_scenario("a"), Policy(), planner).document()["stats"]["model_calls"]
    assert first == second > 0


def _plan_once(planner, deps, obs, finding):
    return planner.plan([finding], obs, deps.audit.history(obs.at), deps)


def _setup():
    deps, cluster = simulated_deps(_scenario(), Policy(), PolicyModel())
    cluster.advance_to(90 * 60)
    obs = deps.observe()
    finding = Finding(kind="idle", target="ml/notebook", since=obs.at - timedelta(minutes=90), detected_at=obs.at,
                      evidence="0% GPU for 90 min", gpus=1)
    return deps, obs, finding


def test_a_plan_made_while_the_endpoint_failed_is_not_kept():
    state = {"down": True}

    def flaky(messages, index):
        if state["down"]:
            raise ConnectionError("connection refused")
        return AIMessage(content="nothing to do yet", usage_metadata=USAGE)

    deps, obs, finding = _setup()
    planner = LLMPlanner(ScriptedChatModel(script=flaky), name="flaky")
    down = _plan_once(planner, deps, obs, finding)
    assert down.degraded and down.model_calls == 1
    assert [p.proposed_by for p in down.proposals] == ["policy-model"]
    state["down"] = False
    up = _plan_once(planner, deps, obs, finding)
    assert up.degraded is None and up.model_calls == 1 and up.cached_findings == 0
    again = _plan_once(planner, deps, obs, finding)
    assert again.model_calls == 0 and again.cached_findings == 1 and again.proposals == up.proposals


def test_a_new_job_under_the_same_name_or_another_kind_of_waste_is_new():
    deps, obs, finding = _setup()
    planner = LLMPlanner(ScriptedChatModel(script=lambda m, i: AIMessage(content="ok")), name="m")
    assert _plan_once(planner, deps, obs, finding).model_calls == 1
    assert _plan_once(planner, deps, obs, finding).model_calls == 0
    assert _plan_once(planner, deps, obs, finding.model_copy(update={"kind": "zombie"})).model_calls == 1
    job = obs.jobs_by_id()["ml/notebook"]
    renamed = obs.model_copy(update={"jobs": [j if j.id != job.id else j.model_copy(update={"uid": "other"})
                                              for j in obs.jobs]})
    renamed._jobs_index = None  # model_copy keeps the index of the original's jobs
    assert _plan_once(planner, deps, renamed, finding).model_calls == 1


def test_the_prompt_keeps_a_stable_prefix_across_sweeps():
    model = ScriptedChatModel(script=_eager)
    run_scenario(_scenario(), Policy(), LLMPlanner(model, name="eager"))
    asked = [m for m in model.calls if isinstance(m[-1], HumanMessage)]
    systems = {str(m[0].content) for m in asked}
    assert len(systems) == 1 and isinstance(asked[0][0], SystemMessage)
    heads = {str(m[1].content).split("Sweep at")[0] for m in asked}
    assert len(heads) == 1 and "Runbooks you may cite" in heads.pop()
    assert len({str(m[1].content) for m in asked}) == len(asked)  # the time and findings come after it


def test_policy_model_is_a_model_name_eval_can_compare_against():
    from agent.config.settings import Settings
    from agent.wiring import make_planner

    settings = Settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="m")
    assert isinstance(make_planner(settings, "policy-model"), PolicyModel)
    assert isinstance(make_planner(settings, "m"), LLMPlanner)


def test_a_turn_that_ended_without_an_answer_is_asked_again():
    replies = {"n": 0}

    def terse(messages, index):
        replies["n"] += 1
        return AIMessage(content="" if replies["n"] == 1 else "nothing to do")

    deps, obs, finding = _setup()
    planner = LLMPlanner(ScriptedChatModel(script=terse), name="terse")
    empty = _plan_once(planner, deps, obs, finding)
    assert empty.model_calls == 1 and not empty.answered and "ml/notebook" in empty.explanation
    answered = _plan_once(planner, deps, obs, finding)
    assert answered.model_calls == 1 and answered.answered
    assert _plan_once(planner, deps, obs, finding).model_calls == 0

    looping = LLMPlanner(ScriptedChatModel(script=lambda m, i: AIMessage(content="", tool_calls=[
        tool_call("list_jobs", f"l{i}")])), name="looping", max_rounds=2)
    assert _plan_once(looping, deps, obs, finding).model_calls == 2
    assert _plan_once(looping, deps, obs, finding).model_calls == 2  # not finished: asked once more
    again = _plan_once(looping, deps, obs, finding)  # then the same state is not asked a third time
    assert again.model_calls == 0 and "did not finish its turn on this state 2 times" in again.explanation
    assert again.proposals  # the rules' floor still plans the finding


def test_a_turn_that_never_finishes_is_asked_again_when_the_state_changes():
    deps, obs, finding = _setup()
    silent = LLMPlanner(ScriptedChatModel(script=lambda m, i: AIMessage(content="")), name="silent")
    assert [_plan_once(silent, deps, obs, finding).model_calls for _ in range(3)] == [1, 1, 0]
    other = finding.model_copy(update={"kind": "zombie"})
    assert _plan_once(silent, deps, obs, other).model_calls == 1  # another state: asked


def test_a_turn_that_used_tools_and_then_fell_silent_is_finished():
    def look_then_silence(messages, index):
        if isinstance(messages[-1], HumanMessage):
            return AIMessage(content="", tool_calls=[tool_call("list_jobs", f"l{index}")])
        return AIMessage(content="")  # small models often end a turn with an empty message

    deps, obs, finding = _setup()
    planner = LLMPlanner(ScriptedChatModel(script=look_then_silence), name="quiet")
    first = _plan_once(planner, deps, obs, finding)
    assert first.answered and first.model_calls == 2
    assert _plan_once(planner, deps, obs, finding).model_calls == 0


def test_a_kept_proposal_the_guardrail_refused_is_not_replayed_at_every_sweep():
    """The eager model proposes the stop with the warning; the guardrail refuses it (no notice yet). Its kept
    plan is not replayed sweep after sweep, each one refused and audited again: the refusal stands until the
    state changes (the notice runs out) and the model is asked again."""
    model = ScriptedChatModel(script=_eager)
    run = run_scenario(_scenario(), Policy(), LLMPlanner(model, name="eager"))
    refusals = [a for a in run.document()["actions"] if a["job"] == "ml/notebook" and a["action"] == "terminate"
                and a["status"] == "blocked"]
    # One per time the model was asked while the stop was not yet due (at the finding, after the warning), not one
    # per sweep of the hour's notice (12).
    assert 1 <= len(refusals) <= 2, [a["at_s"] for a in refusals]
