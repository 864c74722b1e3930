"""ChatOps delivery when DingTalk and WeCom are both configured and one of them misbehaves, and the chat-level
dedupe against the guardrail's re-warnings.

The robots are the loopback servers of test_dingtalk and test_wecom; either can answer an HTML page in its JSON's
place, as a corporate proxy's login page or a maintenance page does (HTTP 200, text/html)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.chatops import dingtalk, wecom
from agent.chatops.notifier import ChatOpsNotifier, Route
from agent.config.policy import Policy
from core.cluster import NotifyResult
from tests.records_world import JOB, Steward
from tests.test_dingtalk import RobotServer
from tests.test_wecom import WeComRobotServer

PAGE = "<html><head><title>Proxy login</title></head><body>" + "Please sign in to continue. " * 40 + "</body></html>"
WARNING = "[GPU Steward] ml/nb: GPUs allocated but idle\n\nWhy: 0.0% for 60m"
NOON = datetime(2026, 12, 3, 4, 0, tzinfo=UTC)  # 12:00 in Shanghai, a Thursday


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


@pytest.fixture
def robots():
    ding, wecom_server = RobotServer("SEC" + secrets.token_hex(16)), WeComRobotServer(secrets.token_hex(16))
    yield ding, wecom_server
    ding.close()
    wecom_server.close()


def both(ding: RobotServer, wecom_server: WeComRobotServer) -> Route:
    return Route(dingtalk=dingtalk.DingTalkRobot(ding.url, ding.secret), wecom=wecom.WeComRobot(wecom_server.url))


def test_a_warning_dingtalk_took_is_sent_when_wecom_answers_an_html_page(robots):
    ding, wecom_server = robots
    wecom_server.page = PAGE
    notifier = ChatOpsNotifier(clock=Clock(NOON), policy=Policy(), default=both(ding, wecom_server))
    result = notifier.notify("alice", "GPU Steward: ml/nb", WARNING, job_id="ml/nb", target_uid="u1",
                             deadline=NOON + timedelta(hours=1))
    assert result.status == "sent" and result.channel == "dingtalk", result
    assert len(ding.messages) == 1 and wecom_server.messages == []
    # The error names the channel and what it answered, cut short, and holds no webhook key.
    assert result.detail.startswith("wecom: WeCom webhook answered HTTP 200 with text/html"), result.detail
    assert "Proxy login" in result.detail and len(result.detail) < 300
    assert wecom_server.key not in result.detail


def test_wecom_is_tried_when_dingtalk_answers_an_html_page(robots):
    ding, wecom_server = robots
    ding.page = PAGE
    notifier = ChatOpsNotifier(clock=Clock(NOON), policy=Policy(), default=both(ding, wecom_server))
    result = notifier.notify("alice", "GPU Steward: ml/nb", WARNING, job_id="ml/nb", target_uid="u1",
                             deadline=NOON + timedelta(hours=1))
    assert result.status == "sent" and result.channel == "wecom", result
    assert len(wecom_server.messages) == 1 and ding.messages == []
    assert result.detail.startswith("dingtalk: DingTalk webhook answered HTTP 200 with text/html"), result.detail
    assert "access_token" not in result.detail and "sign=" not in result.detail


def test_both_channels_failing_is_an_error_naming_each_and_no_secret(robots):
    ding, wecom_server = robots
    ding.page = PAGE
    wecom_server.page = "<html>maintenance</html>"
    notifier = ChatOpsNotifier(clock=Clock(NOON), policy=Policy(), default=both(ding, wecom_server))
    result = notifier.notify("alice", "s", WARNING, job_id="ml/nb", deadline=NOON + timedelta(hours=1))
    assert result.status == "error", result
    assert "dingtalk: DingTalk webhook answered" in result.detail and "wecom: WeCom webhook answered" in result.detail
    assert "maintenance" in result.detail
    for secret in (ding.secret, wecom_server.key, "access_token"):
        assert secret not in result.detail
    # Not remembered as sent: the next attempt goes out.
    ding.page = None
    assert notifier.notify("alice", "s", WARNING, job_id="ml/nb").status == "sent"


def test_an_unreachable_webhook_fails_alone_without_its_url():
    wecom_server = WeComRobotServer(secrets.token_hex(16))
    wecom_server.close()  # nothing listens there any more
    ding = RobotServer("SEC" + secrets.token_hex(16))
    try:
        notifier = ChatOpsNotifier(clock=Clock(NOON), policy=Policy(), default=both(ding, wecom_server))
        result = notifier.notify("alice", "s", WARNING, job_id="ml/nb")
    finally:
        ding.close()
    assert result.status == "sent" and result.channel == "dingtalk", result
    assert "wecom: WeCom webhook could not be reached" in result.detail and wecom_server.key not in result.detail


def test_a_warning_dingtalk_took_counts_and_is_not_sent_again_at_every_sweep(tmp_path: Path, robots):
    """End to end: DingTalk takes every warning, WeCom answers an HTML page. The first warning is delivered, recorded
    with its deadline, not re-sent at each sweep, and the stop lands after it (the job ignores SIGTERM)."""
    ding, wecom_server = robots
    wecom_server.page = PAGE
    steward = Steward(tmp_path)
    steward.deps.notifier = ChatOpsNotifier(clock=steward.cluster, policy=steward.deps.policy,
                                            default=both(ding, wecom_server))
    try:
        for _ in range(36):  # three hours of 5-minute sweeps
            steward.sweep(5)
        entries = steward.deps.audit.entries(kind="execution", target=JOB, limit=1000, newest_first=False)
    finally:
        steward.close()
    notes = [e for e in entries if e.action == "notify"]
    assert len(ding.messages) == 1, [(e.at, e.status, e.data.get("detail")) for e in notes]
    first = notes[0]
    assert first.status == "executed" and first.data.get("deadline"), first
    assert "dingtalk" in first.data["detail"] and "text/html" in first.data["detail"]
    assert all(e.status != "failed" for e in notes)
    deadline = datetime.fromisoformat(first.data["deadline"])
    stops = [e for e in entries if e.action == "terminate" and e.status == "executed"]
    assert stops and stops[0].at >= deadline, (deadline, stops)


def test_a_stop_warning_the_guardrail_asks_for_is_never_suppressed_but_advice_is(robots):
    ding, _ = robots
    clock = Clock(NOON)
    notifier = ChatOpsNotifier(clock=clock, policy=Policy(), default=Route(dingtalk=dingtalk.DingTalkRobot(
        ding.url, ding.secret)))
    deadline = NOON + timedelta(hours=3)  # the end of a long-tail grace: the same in both warnings
    assert notifier.notify("alice", "s", WARNING, job_id="ml/nb", target_uid="u1", deadline=deadline).status == "sent"
    clock.at += timedelta(minutes=40)  # the owner's keep 30m lapsed; the guardrail asks for a new warning
    assert notifier.notify("alice", "s", WARNING, job_id="ml/nb", target_uid="u1", deadline=deadline).status == "sent"
    advice = "[GPU Steward] ml/nb: over-provisioned\n\nWhy: 1 of 4 GPUs used"
    assert notifier.notify("alice", "s", advice, job_id="ml/nb", target_uid="u1").status == "sent"
    clock.at += timedelta(hours=1)
    assert notifier.notify("alice", "s", advice, job_id="ml/nb", target_uid="u1").status == "suppressed"
    assert len(ding.messages) == 3


def test_the_owner_is_warned_again_after_a_keep_lapses(tmp_path: Path, robots):
    """The owner keeps the job for 30 minutes after the first warning. When the keep lapses the guardrail asks for a
    new warning (a stop needs one sent since): the chat dedupe (job + kind for 4 h) must not swallow it."""
    ding, _ = robots
    steward = Steward(tmp_path)
    steward.deps.notifier = ChatOpsNotifier(clock=steward.cluster, policy=steward.deps.policy, default=Route(
        dingtalk=dingtalk.DingTalkRobot(ding.url, ding.secret)))
    audit = steward.deps.audit
    try:
        while not ding.messages:
            steward.sweep(5)
        first = steward.cluster.now()
        job = steward.deps.scheduler.get_job(JOB)
        audit.record("exemption", at=first + timedelta(minutes=5), run_id="chat", target=JOB, status="granted",
                     reason="keep", data={"until": (first + timedelta(minutes=35)).isoformat(), "by": "bob",
                                          "target_uid": job.uid})
        for _ in range(24):  # two hours
            steward.sweep(5)
        entries = audit.entries(kind="execution", target=JOB, limit=1000, newest_first=False)
    finally:
        steward.close()
    notes = [e for e in entries if e.action == "notify"]
    assert len(ding.messages) == 2, [(e.at, e.status, e.data.get("detail")) for e in notes]
    warned = [e for e in notes if e.status == "executed"]
    assert len(warned) == 2 and warned[1].at >= first + timedelta(minutes=35)
    assert not [e for e in notes if "suppressed" in (e.data.get("detail") or "")]
    # The stop comes a full notice after the second warning, never on the first one's deadline.
    stops = [e for e in entries if e.action == "terminate" and e.status == "executed"]
    assert stops and stops[0].at >= datetime.fromisoformat(warned[1].data["deadline"]), stops


class Suppressing:
    """A channel that drops every message as a duplicate."""

    def __init__(self) -> None:
        self.asked = 0

    def notify(self, recipient: str, subject: str, body: str, **_: object) -> NotifyResult:
        self.asked += 1
        return NotifyResult(recipient=recipient, status="suppressed", channel="chatops", detail="duplicate")


def test_a_suppressed_warning_never_counts_as_delivered(tmp_path: Path):
    steward = Steward(tmp_path)
    notifier = steward.deps.notifier = Suppressing()
    try:
        for _ in range(36):
            steward.sweep(5)
        entries = steward.deps.audit.entries(kind="execution", target=JOB, limit=1000, newest_first=False)
        state = steward.cluster.get_job(JOB).state
    finally:
        steward.close()
    notes = [e for e in entries if e.action == "notify"]
    assert notifier.asked > 1 and notes and {e.status for e in notes} == {"skipped"}
    assert not any(e.data.get("deadline") for e in notes)
    assert not [e for e in entries if e.action in ("terminate", "force_terminate")] and state == "running"


def test_an_approval_card_reaches_wecom_when_dingtalk_answers_an_html_page(robots):
    from agent.chatops.cards import approval_card_listener
    from tests.test_dingtalk import NOW, World

    ding, wecom_server = robots
    ding.page = PAGE
    world = World()
    approval = world.pending_force_kill()
    listener = approval_card_listener(both(ding, wecom_server), world.links, now_s=lambda: NOW)
    listener(type("Event", (), {"kind": "approval_requested", "approval": approval})())
    assert ding.messages == [] and wecom_server.messages
    assert wecom_server.messages[0]["msgtype"] == "template_card"


def test_a_channel_that_raises_anything_fails_alone_without_its_secret(robots):
    ding, _ = robots

    class Broken:
        webhook_url = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k3y-s3cr3t"

        def send(self, message: dict) -> dict:
            raise KeyError(f"no route for {self.webhook_url}")

    route = Route(dingtalk=dingtalk.DingTalkRobot(ding.url, ding.secret), wecom=Broken())  # type: ignore[arg-type]
    result = ChatOpsNotifier(clock=Clock(NOON), policy=Policy(), default=route).notify("alice", "s", WARNING)
    assert result.status == "sent" and result.channel == "dingtalk", result
    assert result.detail.startswith("wecom: KeyError") and "k3y-s3cr3t" not in result.detail, result.detail
