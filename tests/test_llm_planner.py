"""The LLM planner keeps its prompt bounded: the costliest findings go to the model, the rest to the policy model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from langchain_core.messages import AIMessage

from agent.config.policy import Policy
from agent.planning.llm_planner import LLMPlanner, split_for_model
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.actions import Finding, History
from sim.scenario import parse_scenario
from tests.scripted_model import ScriptedChatModel

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def _finding(i: int, cost: float) -> Finding:
    return Finding(kind="idle", target=f"ml/job-{i}", since=NOW - timedelta(hours=2), detected_at=NOW,
                   evidence=f"job {i} idle", gpus=1, waste_gpu_hours=cost / 4, waste_cost=cost)


def test_the_costliest_findings_go_to_the_model():
    findings = [_finding(i, cost=float(i)) for i in range(10)]
    for_model, rest = split_for_model(findings, 3)
    assert [f.target for f in for_model] == ["ml/job-9", "ml/job-8", "ml/job-7"]
    assert len(rest) == 7
    assert split_for_model(findings, 10) == (findings, [])


def test_overflow_is_planned_by_the_policy_model_and_the_prompt_stays_small():
    jobs = [{"id": f"ml/job-{i}", "user": "u", "gpus": 1, "phases": [{"gpu_util": 0}]} for i in range(6)]
    scenario = parse_scenario({"version": 1, "name": "many", "duration": "2h",
                               "nodes": [{"name": "n0", "gpus": 8}], "jobs": jobs})
    model = ScriptedChatModel(script=lambda messages, i: AIMessage(content="looked at the big ones"))
    deps, cluster = simulated_deps(scenario, Policy(), PolicyModel())
    cluster.advance_to(90 * 60)
    obs = deps.observe()
    findings = [_finding(i, cost=float(i)) for i in range(6)]
    result = LLMPlanner(model, max_findings=2).plan(findings, obs, History(), deps)
    prompt = str(model.calls[0][1].content)
    assert "ml/job-5" in prompt and "ml/job-4" in prompt and "ml/job-0" not in prompt
    # The 4 smaller ones are planned by the policy model; the model proposed nothing for the 2 it was asked
    # about, so the rules' step (the floor) is proposed for them too.
    assert {p.target for p in result.proposals} == {f"ml/job-{i}" for i in range(6)}
    assert all(p.action == "notify" and p.proposed_by == "policy-model" for p in result.proposals)
    assert "4 smaller findings" in result.explanation and "as the floor: notify ml/job-4, notify ml/job-5" in \
        result.explanation


def test_the_models_history_is_dated_and_leaves_out_an_earlier_job_of_the_same_name():
    """A month-old stop printed as "09:00" read as today's; and a namesake's stop (another uid) read as this job's."""
    from agent.planning.llm_planner import _history_block
    from core.actions import DeniedAnswer, HistoryEntry

    month_ago = NOW - timedelta(days=30)
    history = History(entries=[
        HistoryEntry(action="terminate", target="ml/nb", status="executed", at=month_ago, target_uid="old-uid"),
        HistoryEntry(action="notify", target="ml/nb", status="executed", at=NOW - timedelta(hours=1),
                     target_uid="new-uid"),
        HistoryEntry(action="notify", target="ml/other", status="executed", at=NOW, target_uid="x"),
    ], denials=[DeniedAnswer(action="terminate", target="ml/nb", at=month_ago, target_uid="old-uid"),
                DeniedAnswer(action="terminate", target="ml/nb", at=NOW - timedelta(hours=2))])
    block = _history_block(history, {"ml/nb": "new-uid"})
    assert block.splitlines() == [
        "- 2026-11-02 11:00 UTC notify ml/nb: executed",
        "- 2026-11-02 10:00 UTC terminate ml/nb: denied by a human (do not propose it again)",
    ]
    # uid not known: every record of the name may be this job's, dated
    assert "2026-10-03 12:00 UTC terminate ml/nb: executed" in _history_block(history, {"ml/nb": None})
