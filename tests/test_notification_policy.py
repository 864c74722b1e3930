"""Notification policy: working hours in the team's timezone, one message per job and violation per
period, per-project routing, and deferred warnings that do not start the notice period."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from agent.chatops.notifier import ChatOpsNotifier, Route
from agent.config.policy import Policy, PolicyError, parse_policy
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.cluster import JobInfo
from sim.scenario import parse_scenario
from tests.test_dingtalk import SCENARIO

# 2025-06-04 is a Wednesday; 02:00 UTC is 10:00 in Shanghai, 14:00 UTC is 22:00 there.
WED_10_SHANGHAI = datetime(2025, 6, 4, 2, 0, tzinfo=UTC)
WARNING = "[GPU Steward] ml-team/notebook: GPUs allocated but idle\n\nWhy: 0.0% for 60m"


@dataclass
class Clock:
    at: datetime

    def now(self) -> datetime:
        return self.at


@dataclass
class FakeRobot:
    sent: list[dict] = field(default_factory=list)

    def send(self, message: dict) -> dict:
        self.sent.append(message)
        return {"errcode": 0}


@dataclass
class Jobs:
    def get_job(self, job_id: str) -> JobInfo | None:
        return JobInfo(id=job_id, scheduler="kubernetes", namespace="ml", name=job_id, user="alice",
                       project="vision" if "vision" in job_id else None)


def _notifier(clock: Clock, **notifications) -> tuple[ChatOpsNotifier, FakeRobot]:
    """A notifier under working hours that defer (the default sends at any hour: test_the_default_sends_at_night)."""
    robot = FakeRobot()
    policy = Policy.model_validate({"notifications": {"outside_hours": "defer", **notifications}})
    return ChatOpsNotifier(clock=clock, policy=policy, default=Route(dingtalk=robot)), robot


def test_policy_section_is_validated():
    assert parse_policy({"notifications": {"working_hours": "22:00-06:00", "timezone": "UTC"}})
    for bad in ({"working_hours": "9-19"}, {"working_hours": "09:00-09:00"}, {"timezone": "Mars/Olympus"},
                {"outside_hours": "maybe"}):
        with pytest.raises(PolicyError, match="notifications"):
            parse_policy({"notifications": bad})


def test_working_hours_defer_or_send():
    clock = Clock(WED_10_SHANGHAI)
    notifier, robot = _notifier(clock)
    assert notifier.notify("alice", "s", WARNING, job_id="ml-team/notebook").status == "sent"
    clock.at = WED_10_SHANGHAI + timedelta(hours=12)  # 22:00 Shanghai
    assert notifier.notify("alice", "s", WARNING, job_id="other").status == "deferred"
    clock.at = WED_10_SHANGHAI + timedelta(days=3)  # Saturday 10:00
    assert notifier.notify("alice", "s", WARNING, job_id="other").status == "deferred"
    weekend_ok, _ = _notifier(clock, weekdays_only=False)
    assert weekend_ok.notify("alice", "s", WARNING, job_id="other").status == "sent"
    night = Clock(WED_10_SHANGHAI + timedelta(hours=12))
    always, _ = _notifier(night, outside_hours="send")
    assert always.notify("alice", "s", WARNING, job_id="other").status == "sent"
    assert len(robot.sent) == 1


def test_the_default_sends_at_night_and_at_weekends():
    """A notebook left holding a GPU on Friday night is warned then, not on Monday morning: deferring is opt-in."""
    robot = FakeRobot()
    for at in (WED_10_SHANGHAI + timedelta(hours=12), WED_10_SHANGHAI + timedelta(days=3)):
        notifier = ChatOpsNotifier(clock=Clock(at), policy=Policy(), default=Route(dingtalk=robot))
        assert notifier.notify("alice", "s", WARNING, job_id=f"ml-team/nb-{at:%a}").status == "sent"
    assert len(robot.sent) == 2


def test_one_message_per_job_and_violation_per_period():
    clock = Clock(WED_10_SHANGHAI)
    notifier, robot = _notifier(clock)
    assert notifier.notify("alice", "s", WARNING, job_id="ml-team/notebook").status == "sent"
    clock.at += timedelta(hours=1)
    assert notifier.notify("alice", "s", WARNING, job_id="ml-team/notebook").status == "suppressed"
    zombie = WARNING.replace("GPUs allocated but idle", "job looks hung")
    assert notifier.notify("alice", "s", zombie, job_id="ml-team/notebook").status == "sent"
    clock.at += timedelta(hours=4)  # repeat_every (4h) has passed since the first
    assert notifier.notify("alice", "s", WARNING, job_id="ml-team/notebook").status == "sent"
    assert len(robot.sent) == 3


def test_routes_per_project():
    team, default = FakeRobot(), FakeRobot()
    notifier = ChatOpsNotifier(clock=Clock(WED_10_SHANGHAI), policy=Policy(), default=Route(dingtalk=default),
                               per_project={"vision": Route(wecom=team)}, jobs=Jobs())
    assert notifier.notify("alice", "s", WARNING, job_id="vision/train").channel == "wecom"
    assert notifier.notify("alice", "s", WARNING, job_id="nlp/train").channel == "dingtalk"
    assert len(team.sent) == len(default.sent) == 1


def test_deferred_warning_is_skipped_not_failed_and_does_not_start_the_notice():
    deps, cluster = simulated_deps(parse_scenario(SCENARIO), Policy(), PolicyModel())
    night = Policy.model_validate({"notifications": {"outside_hours": "defer", "working_hours": "00:00-00:01", "timezone": "UTC",
                                                     "weekdays_only": False}})
    robot = FakeRobot()
    deps.notifier = ChatOpsNotifier(clock=cluster, policy=night, default=Route(dingtalk=robot))
    service = SweepService(deps)
    for minute in (65, 100, 110):
        cluster.advance_to(minute * 60)
        service.sweep()
    notes = deps.audit.entries(kind="execution", target="ml-team/notebook")
    assert notes and {e.status for e in notes} == {"skipped"} and {e.action for e in notes} == {"notify"}
    assert "deferred" in notes[0].data["detail"]
    assert robot.sent == []
    assert cluster.get_job("ml-team/notebook").state == "running"  # never warned, so never stopped
    assert deps.audit.entries(kind="execution", status="failed") == []


def test_an_owner_reads_the_stop_time_in_the_teams_zone():
    """16:25 UTC is 00:25 the next day in Beijing: an owner told "16:25 UTC" reads the wrong evening."""
    from agent.planning.policy_model import owner_time

    at = datetime(2026, 11, 2, 16, 25, tzinfo=UTC)
    assert owner_time(at, Policy(), "zh") == "2026-11-03 00:25（北京时间）"
    assert owner_time(at, Policy(), "en") == "2026-11-03 00:25 Asia/Shanghai"
    berlin = Policy.model_validate({"notifications": {"timezone": "Europe/Berlin"}})
    assert owner_time(at, berlin, "zh") == "2026-11-02 17:25（Europe/Berlin）"
    assert owner_time(at, Policy.model_validate({"notifications": {"timezone": "UTC"}}), "en") == "2026-11-02 16:25 UTC"


def test_deferred_warnings_hold_on_every_channel_and_so_does_the_stop():
    """`outside_hours: defer` was honoured only by the chat notifier: e-mail, Kubernetes events and the simulator
    warned at 22:00 Shanghai and stopped the job an hour later. The deferral is the sweep's now: the warning waits
    for 09:00, and the stop for the notice after it."""
    from evals.runner import run_scenario

    scenario = parse_scenario({
        "version": 1, "name": "night-defer", "start": "2025-06-04T14:00:00Z", "duration": "13h", "step": "60s",
        "pools": [{"name": "a100", "gpus_per_node": 8, "nodes": 1}],
        "jobs": [{"id": "ml-team/notebook", "user": "alice", "gpus": 1,
                  "phases": [{"duration": "10m", "gpu_util": 60, "gpu_mem_gb": 20, "cpu_pct": 100, "log": "loss"},
                             {"gpu_util": 0, "cpu_pct": 0.5, "log": "silent"}]}],
    })  # Wednesday 22:00 in Shanghai; working hours begin 11 h later (01:00 UTC)
    policy = parse_policy({"notifications": {"outside_hours": "defer"}}, "defer policy")
    run = run_scenario(scenario, policy, PolicyModel())
    done = [(a["action"], a["at_s"]) for a in run.actions if a["job"] == "ml-team/notebook" and a["status"] == "executed"]
    assert done[0][0] == "notify" and done[0][1] == 11 * 3600
    assert done[1][0] == "terminate" and done[1][1] >= 12 * 3600



def test_a_models_warning_at_night_is_held_when_carried_out():
    """The policy model holds its warnings outside working hours; a model that proposes one anyway is held at the
    act (the planner is not what keeps the policy), and says so in the audit."""
    from langchain_core.messages import AIMessage

    from agent.planning.llm_planner import LLMPlanner
    from agent.wiring import simulated_deps
    from tests.scripted_model import ScriptedChatModel, rounds, tool_call
    from tests.test_graph import _scenario

    script = rounds(AIMessage(content="", tool_calls=[tool_call("notify_owner", "c1", job="ml-team/notebook",
                                                                message="your notebook is idle")]),
                    AIMessage(content="warned"))
    model = ScriptedChatModel(script=script)
    data = {**_scenario(), "start": "2025-06-04T14:00:00Z"}  # 22:00 in Shanghai, a Wednesday
    policy = parse_policy({"notifications": {"outside_hours": "defer"}}, "defer policy")
    deps, cluster = simulated_deps(parse_scenario(data), policy, LLMPlanner(model, name="eager"))
    cluster.advance_to(70 * 60)
    SweepService(deps).sweep()
    done = [e for e in deps.audit.entries(kind="execution", limit=100) if e.action == "notify"]
    assert done and all(e.status == "skipped" and e.reason.startswith("deferred: outside working hours")
                        for e in done)
