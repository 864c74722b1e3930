"""A human's deny holds for `approvals.denial_holds_for`: the guardrail refuses it, and neither planner asks again."""

from __future__ import annotations

from datetime import timedelta

from langchain_core.messages import AIMessage

from agent.config.policy import Policy, parse_policy
from agent.graph.service import SweepService
from agent.guardrail.decide import decide
from agent.planning.llm_planner import LLMPlanner
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.actions import DeniedAnswer, History
from sim.scenario import parse_scenario
from tests.scripted_model import ScriptedChatModel, rounds, tool_call
from tests.test_graph import IGNORES, _run_until_approval, _scenario
from tests.test_guardrail import NOW, ago, check, pool_facts, resize


def _denied(minutes_ago: float, action="resize_pool", target="a100-od", uid=None) -> History:
    return History(denials=[DeniedAnswer(action=action, target=target, at=ago(minutes_ago), target_uid=uid,
                                         by="oncall-lead", reason="batch window tonight")])


def test_a_denied_resize_is_refused_while_the_denial_holds_whatever_the_size():
    d = decide(resize(target_nodes=6), pool_facts(), Policy(), _denied(60), approved=True)
    check(d, "deny", "denial_hold", "oncall-lead denied resize_pool on pool a100-od", "batch window tonight",
          "holds for 24h", "until 2025-03-02 11:00 UTC")


def test_the_denial_stops_holding_after_its_period_and_at_zero():
    assert decide(resize(), pool_facts(), Policy(), _denied(25 * 60)).rule != "denial_hold"
    short = parse_policy({"approvals": {"denial_holds_for": "30m"}})
    assert decide(resize(), pool_facts(), short, _denied(31)).rule != "denial_hold"
    assert decide(resize(), pool_facts(), short, _denied(29)).rule == "denial_hold"
    off = parse_policy({"approvals": {"denial_holds_for": 0}})
    assert decide(resize(), pool_facts(), off, _denied(1)).rule != "denial_hold"


def test_a_denial_holds_only_for_its_action_and_its_job():
    from tests.test_guardrail import act, facts, job

    history = _denied(10, action="terminate", target="ml/train-1", uid="uid-1")
    same = decide(act("terminate"), facts(job(uid="uid-1")), Policy(), history)
    check(same, "deny", "denial_hold", "terminate on job ml/train-1")
    namesake = decide(act("terminate"), facts(job(uid="uid-2")), Policy(), history)
    assert namesake.rule != "denial_hold"
    other_action = decide(act("notify"), facts(job(uid="uid-1")), Policy(), history)
    assert other_action.rule != "denial_hold"
    assert NOW - history.denials[0].at == timedelta(minutes=10)


def _asks_to_force_stop():
    return rounds(AIMessage(content="", tool_calls=[tool_call("terminate_job", "c1", job="ml-team/stubborn",
                                                              force=True, reason="ignored SIGTERM, still idle")]),
                  AIMessage(content="asked to force-stop ml-team/stubborn"))


def _deny_then_let_a_model_ask_again(policy: Policy) -> tuple[list, list]:
    scenario = parse_scenario(_scenario([IGNORES]))
    deps, cluster = simulated_deps(scenario, policy, PolicyModel())
    service = SweepService(deps)
    approval = _run_until_approval(service, cluster)
    service.answer(approval.id, "deny", by="oncall-lead", reason="keep it")
    model = ScriptedChatModel(script=_asks_to_force_stop())
    deps.planner = LLMPlanner(model, name="scripted")
    explanations = []
    for _ in range(3):
        model.calls, model.script = [], _asks_to_force_stop()
        cluster.advance_to(cluster.offset_s + 600)
        explanations.append(service.sweep().state.get("plan", {}).get("explanation", ""))
    asked = [a for a in deps.approvals.all(limit=100) if a.target == "ml-team/stubborn" and a.id != approval.id]
    return asked, explanations


def test_the_model_planner_does_not_ask_again_while_a_denial_holds():
    asked, explanations = _deny_then_let_a_model_ask_again(Policy())
    assert asked == []
    assert all("force_terminate not proposed: oncall-lead denied it" in e for e in explanations), explanations


def test_without_a_hold_the_model_would_ask_again():
    """The control: the same model, with the hold off, opens a new request after the deny."""
    asked, _ = _deny_then_let_a_model_ask_again(parse_policy({"approvals": {"denial_holds_for": 0}}))
    assert [a.action for a in asked][:1] == ["force_terminate"]
