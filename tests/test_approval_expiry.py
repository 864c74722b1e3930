"""Silence never approves, but it does not end the question either: an expired request for a job that
still wastes is asked again after `approvals.reask_after`, one escalation group further, on a moving
simulated clock. A human deny stands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.chatops.cards import approval_card_listener, card_text
from agent.chatops.directory import UserDirectory
from agent.chatops.links import ApprovalLinks
from agent.chatops.notifier import Route
from agent.config.policy import PolicyError, parse_policy
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.records.approvals import Approval, ApprovalError
from agent.records.audit import AuditLog
from agent.wiring import simulated_deps
from evals.runner import run_scenario
from sim.scenario import parse_scenario

HOUR = 3600.0
STEP = 300.0
JOB = "ml-team/stubborn"
GROUPS = [["lead-a"], ["head-b", "head-c"]]


def _scenario(**job: object) -> dict:
    return {
        "version": 1, "name": "silent-approvers", "duration": "24h", "step": "60s",
        "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 1, "min_nodes": 1, "price_per_gpu_hour": 4.0,
                   "billing": "on-demand"}],
        "jobs": [{"id": JOB, "user": "bob", "gpus": 2, "sigterm": "ignores",
                  "phases": [{"gpu_util": 0, "gpu_mem_gb": 10, "cpu_pct": 0.1}], **job}],
    }


class World:
    """A steward on a simulated cluster whose clock only moves when the test moves it."""

    def __init__(self, approvals: dict | None = None, **job: object) -> None:
        policy = parse_policy({"approvals": {"escalation": GROUPS} if approvals is None else approvals})
        self.deps, self.cluster = simulated_deps(parse_scenario(_scenario(**job)), policy, PolicyModel())
        self.service = SweepService(self.deps)
        self.t = 0.0

    def run_until(self, until_s: float, stop=None) -> None:  # noqa: ANN001
        """Sweep every 5 minutes (expiring overdue requests first, as the server does) until `stop()` holds."""
        while self.t + STEP <= until_s:
            self.t += STEP
            self.cluster.advance_to(self.t)
            self.service.expire_due()
            self.service.sweep()
            if stop is not None and stop():
                return

    def requests(self) -> list[Approval]:
        return [a for a in self.deps.approvals.all() if a.target == JOB and a.action == "force_terminate"]

    def forced(self) -> list:
        return [e for e in self.deps.audit.entries(kind="execution", target=JOB, limit=10_000)
                if e.action == "force_terminate" and e.status == "executed"]

    def at_s(self, when) -> float:  # noqa: ANN001
        return self.cluster.offset_of(when)


def test_expired_request_is_asked_again_to_the_next_group_and_runs_once_approved() -> None:
    w = World()
    w.run_until(4 * HOUR, lambda: bool(w.requests()))
    [first] = w.requests()
    assert (first.round, first.approvers, first.status) == (1, ["lead-a"], "pending")
    assert w.cluster.get_job(JOB).state == "stopping"  # it ignored SIGTERM and keeps its GPUs

    # Nobody answers: the request expires into a refusal and nothing is forced.
    w.run_until(24 * HOUR, lambda: len(w.requests()) == 2)
    first, second = w.requests()
    assert first.status == "expired"
    expired_at = w.at_s(first.expires_at)
    reask_after = w.deps.policy.approvals.reask_after
    assert reask_after == 2 * HOUR  # the default back-off
    assert w.at_s(second.requested_at) >= expired_at + reask_after  # not before the back-off
    assert w.forced() == [] and w.cluster.get_job(JOB).state == "stopping"
    with pytest.raises(ApprovalError):  # a late yes to the expired request is refused
        w.service.answer(first.id, "approve", by="lead-a")
    assert w.forced() == []

    # Asked again, one group further, and the audit says why.
    assert (second.round, second.approvers, second.status) == (2, ["head-b", "head-c"], "pending")
    assert second.payload["reask_of"] == first.id and second.payload["group"] == 2
    [escalated] = w.deps.audit.entries(kind="approval", status="escalated")
    assert escalated.data["previous_approval_id"] == first.id and escalated.data["approval_id"] == second.id
    assert escalated.data["approvers"] == ["head-b", "head-c"] and "expired unanswered" in (escalated.reason or "")
    [opened] = [e for e in w.deps.audit.entries(kind="approval", status="pending") if e.data["approval_id"] == second.id]
    assert opened.data["round"] == 2 and opened.data["approvers"] == ["head-b", "head-c"]
    # The guardrail wants a fresh warning before any stop: the owner was warned again before the re-ask.
    rewarned = [e for e in w.deps.audit.entries(kind="execution", target=JOB, status="executed", limit=100)
                if e.action == "notify" and expired_at <= w.at_s(e.at) <= w.at_s(second.requested_at)]
    assert len(rewarned) == 1
    assert w.at_s(second.requested_at) - w.at_s(rewarned[0].at) >= w.deps.policy.warning.min_notice

    # Still pending for a while: nothing happens without a yes.
    w.run_until(w.t + HOUR)
    assert w.forced() == [] and w.deps.approvals.get(second.id).status == "pending"

    # The next group says yes: forced exactly once, and never again.
    result = w.service.answer(second.id, "approve", by="head-b", reason="confirmed idle")
    assert [o["status"] for o in result.state["outcomes"]] == ["executed"]
    w.run_until(w.t + 6 * HOUR)
    assert len(w.forced()) == 1 and w.forced()[0].data["approved_by"] == "head-b"
    assert w.cluster.get_job(JOB).state not in ("running", "stopping")
    assert len(w.requests()) == 2
    with pytest.raises(ApprovalError):
        w.service.answer(second.id, "approve", by="head-c")
    assert len(w.forced()) == 1


def test_silence_keeps_asking_the_last_group_and_never_approves() -> None:
    w = World()
    w.run_until(24 * HOUR)
    requests = w.requests()
    assert len(requests) >= 3
    assert [r.round for r in requests] == list(range(1, len(requests) + 1))
    assert [r.approvers for r in requests[:3]] == [["lead-a"], ["head-b", "head-c"], ["head-b", "head-c"]]
    for before, after in zip(requests, requests[1:], strict=False):
        assert before.status == "expired"
        assert w.at_s(after.requested_at) >= w.at_s(before.expires_at) + 2 * HOUR
    assert [e.status for e in w.deps.audit.entries(kind="approval", newest_first=False, limit=1000)
            if e.status in ("escalated", "reasked")][:2] == ["escalated", "reasked"]
    assert w.forced() == []
    assert w.cluster.get_job(JOB).state == "stopping"


def test_a_human_deny_is_not_asked_again() -> None:
    w = World()
    w.run_until(4 * HOUR, lambda: bool(w.requests()))
    [first] = w.requests()
    w.service.answer(first.id, "deny", by="lead-a", reason="owner is copying results out")
    w.run_until(16 * HOUR)
    assert [(r.id, r.status) for r in w.requests()] == [(first.id, "denied")]
    assert w.forced() == []
    assert w.deps.audit.entries(kind="approval", status="reasked") == []
    assert w.deps.audit.entries(kind="approval", status="escalated") == []


def test_reask_after_null_leaves_an_expired_request_closed() -> None:
    w = World(approvals={"reask_after": None, "escalation": GROUPS})
    w.run_until(16 * HOUR)
    assert [r.status for r in w.requests()] == ["expired"]
    assert w.forced() == []


def test_no_reask_when_the_job_stopped_wasting() -> None:
    w = World(end="7h")  # gone on its own after the first request expired (~5h35m), before the back-off ends
    w.run_until(14 * HOUR)
    assert [r.status for r in w.requests()] == ["expired"]
    assert w.forced() == []


def test_without_escalation_groups_the_same_approvers_are_asked_again() -> None:
    w = World(approvals={"reask_after": "1h"})
    w.run_until(24 * HOUR, lambda: len(w.requests()) == 2)
    first, second = w.requests()
    assert (second.round, second.approvers) == (2, [])
    assert w.at_s(second.requested_at) >= w.at_s(first.expires_at) + HOUR
    [reasked] = w.deps.audit.entries(kind="approval", status="reasked")
    assert reasked.data["approval_id"] == second.id and reasked.data["group"] is None


def test_scripted_answer_on_the_eval_runner_approves_the_escalated_request() -> None:
    data = _scenario()
    data["duration"] = "12h"
    data["approvals"] = [{"job": JOB, "decision": "approve", "at": "9h", "by": "head-b"}]
    run = run_scenario(parse_scenario(data), parse_policy({"approvals": {"escalation": GROUPS}}), PolicyModel())
    forced = [a for a in run.actions if a["job"] == JOB and a["action"] == "force_terminate"]
    assert [a["status"] for a in forced] == ["expired", "executed"]
    assert forced[1]["at_s"] >= 9 * HOUR  # when the second group said yes, not when it was asked


def test_escalation_policy_is_validated() -> None:
    approvals = parse_policy({"approvals": {"reask_after": "3h", "escalation": [["a"], ["b", "c"]]}}).approvals
    assert (approvals.reask_after, approvals.escalation) == (3 * HOUR, [["a"], ["b", "c"]])
    assert parse_policy({}).approvals.reask_after == 2 * HOUR
    for bad in ({"reask_after": 0}, {"reask_after": "soon"}, {"escalation": [[]]}, {"escalation": ["lead"]},
                {"escalation": [[" "]]}):
        with pytest.raises(PolicyError, match="approvals"):
            parse_policy({"approvals": bad})


def test_reask_entries_do_not_close_a_pending_request_in_history() -> None:
    audit = AuditLog()
    now = datetime(2026, 11, 2, 12, tzinfo=UTC)
    audit.record("approval", at=now, run_id="r", status="pending", data={"approval_id": "apr_2", "proposal_key": "k"})
    audit.record("approval", at=now, run_id="r", status="escalated", data={"approval_id": "apr_2", "proposal_key": "k"})
    assert audit.history(now + timedelta(minutes=1)).pending_approvals == ["k"]


class _Robot:
    def __init__(self) -> None:
        self.messages: list[dict] = []

    def send(self, message: dict) -> dict:
        self.messages.append(message)
        return {"errcode": 0}


def test_an_escalated_card_names_and_mentions_the_next_group() -> None:
    w = World()
    w.run_until(24 * HOUR, lambda: len(w.requests()) == 2)
    _first, second = w.requests()
    title, text = card_text(second, "en")
    assert "2nd time" in text and "head-b, head-c" in text
    assert "第 2 次" in card_text(second, "zh")[1]
    ding, wecom = _Robot(), _Robot()
    directory = UserDirectory(users={"head-b": {"dingtalk": "staff-b", "wecom": "wx-b"}})
    listener = approval_card_listener(Route(dingtalk=ding, wecom=wecom),  # type: ignore[arg-type]
                                      ApprovalLinks("0123456789abcdef-secret", "https://steward.example"),
                                      now_s=lambda: 0.0, directory=directory)
    listener(type("Event", (), {"kind": "approval_requested", "approval": second})())
    card, ping = ding.messages
    assert card["msgtype"] == "actionCard" and second.id in card["actionCard"]["text"]
    assert ping["at"]["atUserIds"] == ["staff-b", "head-c"]
    assert wecom.messages[1]["markdown"]["content"].endswith("<@wx-b> <@head-c>")
