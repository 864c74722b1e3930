"""DingTalk ChatOps: signed robot sends, the outgoing callback, keep/approve commands and signed approve links.

No real DingTalk is reached: a loopback robot server checks `timestamp` and `sign` on the webhook
query exactly as DingTalk documents (HMAC-SHA256 of "timestamp\\nsecret", base64, URL-encoded, at
most an hour old) and answers errcode 0, or 310000 on a bad signature. Callbacks are signed the
way DingTalk signs outgoing-robot requests (headers `timestamp`, `sign`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from agent.chatops import dingtalk
from agent.chatops.cards import approval_card_listener
from agent.chatops.links import ApprovalLinks, LinkRefused, UsedNonces
from agent.chatops.notifier import ChatOpsNotifier, Route
from agent.chatops.replay import SeenCallbacks
from agent.chatops.router import chatops_router
from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.graph.execute import fresh_facts
from agent.graph.service import SweepService
from agent.guardrail.decide import decide
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.actions import ProposedAction
from sim.scenario import parse_scenario
from tests.conftest import free_port
from tests.loopback import send_json, send_page

NOW = 1_750_000_000.0  # the wall clock the router sees


class RobotServer:
    """A loopback DingTalk custom robot: verifies the signed query like DingTalk and records messages. With `page`
    set, it answers that HTML page instead (a proxy's login page, a maintenance page), taking nothing."""

    def __init__(self, secret: str) -> None:
        self.secret, self.messages, self.refused = secret, [], []
        self.page: str | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if server.page is not None:
                    server.refused.append(body)
                    send_page(self, server.page)
                    return
                ts, sign = query.get("timestamp", [""])[0], query.get("sign", [""])[0]
                expected = base64.b64encode(hmac.new(server.secret.encode(), f"{ts}\n{server.secret}".encode(),
                                                     hashlib.sha256).digest()).decode()
                fresh = ts.isdigit() and abs(time.time() * 1000 - int(ts)) < 3600 * 1000
                if query.get("access_token") != ["tok"] or not fresh or sign != expected:
                    server.refused.append(body)
                    answer = {"errcode": 310000, "errmsg": "sign not match, more: [https://ding-doc.dingtalk.com]"}
                else:
                    server.messages.append(body)
                    answer = {"errcode": 0, "errmsg": "ok"}
                send_json(self, answer)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/robot/send?access_token=tok"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def robot():
    server = RobotServer("SEC" + secrets.token_hex(16))
    yield server
    server.close()


IGNORES = {"id": "ml-team/stubborn", "user": "bob", "gpus": 2, "node": "a100-1", "sigterm": "ignores",
           "phases": [{"gpu_util": 0, "gpu_mem_gb": 10, "cpu_pct": 0.1}]}
SCENARIO = {
    "version": 1, "name": "chatops", "duration": "4h", "step": "30s",
    "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 2, "min_nodes": 1, "max_nodes": 4,
               "price_per_gpu_hour": 4.0, "billing": "on-demand"}],
    "jobs": [{"id": "ml-team/notebook", "user": "alice", "gpus": 2, "node": "a100-0",
              "phases": [{"gpu_util": 0, "gpu_mem_gb": 10, "cpu_pct": 0.3}]}, IGNORES],
}


class World:
    """A SweepService over a simulated cluster, the ChatOps router on a bare app, and signing helpers."""

    def __init__(self, app_secret: str | None = None, approvers: tuple[str, ...] = ("staff-lead",),
                 data_dir: Path | None = None) -> None:
        """data_dir: the router keeps spent links and taken callbacks there (else in memory, per World)."""
        self.deps, self.cluster = simulated_deps(parse_scenario(SCENARIO), Policy(), PolicyModel())
        self.service = SweepService(self.deps)
        self.app_secret = app_secret or secrets.token_urlsafe(24)
        self.link_secret = secrets.token_urlsafe(24)
        self.settings = Settings(dingtalk_app_secret=self.app_secret, chatops_link_secret=self.link_secret,
                                 chatops_public_url="http://testserver", chatops_approvers=list(approvers),
                                 chatops_users={"alice": {"dingtalk": "staff-alice"},
                                                "bob": {"dingtalk": "staff-bob"}},
                                 **({"data_dir": data_dir} if data_dir else {}))
        self.now = NOW
        self.data_dir = data_dir
        self.used = UsedNonces()
        self.start()
        self.links = ApprovalLinks(self.link_secret, "http://testserver")

    def start(self) -> None:
        """A router as a (re)started server builds it: over the data dir's stores when there is one."""
        stores = {} if self.data_dir else {"used_nonces": self.used,
                                           "seen_callbacks": SeenCallbacks(keep_s=dingtalk.REPLAY_KEEP_S)}
        app = FastAPI()
        app.include_router(chatops_router(self.settings, lambda: self.service, now_s=lambda: self.now, **stores))
        self.client = TestClient(app)

    def signed(self, staff_id: str, text: str, *, ts_ms: int | None = None, secret: str | None = None):
        """(headers, body) of an outgoing callback as DingTalk signs it: the timestamp only."""
        self.now += 1  # DingTalk's sign covers only the timestamp: each (timestamp, sign) is taken once
        ts = str(ts_ms if ts_ms is not None else int(self.now * 1000))
        body = {"msgtype": "text", "text": {"content": f" {text}"}, "senderNick": staff_id,
                "senderStaffId": staff_id, "conversationId": "cid", "sessionWebhook": "http://127.0.0.1:9/x"}
        return {"timestamp": ts, "sign": dingtalk.sign(ts, secret or self.app_secret)}, body

    def say(self, staff_id: str, text: str, **kw):
        headers, body = self.signed(staff_id, text, **kw)
        return self.client.post("/webhooks/dingtalk", json=body, headers=headers)

    def sweep_at(self, *minutes: int) -> None:
        for minute in minutes:
            self.cluster.advance_to(minute * 60)
            self.service.sweep()

    def pending_force_kill(self):
        self.sweep_at(65, 130, 140, 150)  # warned at 65, stopped after the hour of notice, SIGTERM ignored
        pending = [a for a in self.deps.approvals.pending() if a.target == "ml-team/stubborn"]
        assert pending, "no approval was requested"
        return pending[0]


def test_robot_signs_webhook_and_sends_markdown_and_action_card(robot):
    bot = dingtalk.DingTalkRobot(robot.url, robot.secret)
    bot.send(dingtalk.markdown_message("GPU Steward", "**idle**", at_user_ids=["staff-alice"]))
    bot.send(dingtalk.action_card("Approve?", "text", [("Approve", "http://x/a"), ("Deny", "http://x/d")]))
    assert [m["msgtype"] for m in robot.messages] == ["markdown", "actionCard"]
    assert robot.messages[0]["at"]["atUserIds"] == ["staff-alice"] and "@staff-alice" in robot.messages[0][
        "markdown"]["text"]
    assert [b["title"] for b in robot.messages[1]["actionCard"]["btns"]] == ["Approve", "Deny"]


def test_wrong_secret_surfaces_errcode_310000(robot):
    with pytest.raises(dingtalk.DingTalkError) as err:
        dingtalk.DingTalkRobot(robot.url, "SECwrong").send(dingtalk.markdown_message("t", "x"))
    assert err.value.errcode == 310000 and robot.refused and not robot.messages


def test_notifier_mentions_owner_and_reports_errors(robot):
    deps, cluster = simulated_deps(parse_scenario(SCENARIO), Policy(), PolicyModel())
    policy = Policy.model_validate({"notifications": {"outside_hours": "send"}})
    ok = ChatOpsNotifier(clock=cluster, policy=policy, default=Route(dingtalk=dingtalk.DingTalkRobot(robot.url, robot.secret)),
                         directory=__import__("agent.chatops.directory", fromlist=["x"]).UserDirectory(
                             users={"alice": {"dingtalk": "staff-alice"}}))
    assert ok.notify("alice", "GPU Steward: nb", "[GPU Steward] nb: idle\n\nWhy: 0%", job_id="nb").status == "sent"
    assert robot.messages[-1]["at"]["atUserIds"] == ["staff-alice"]
    bad = ChatOpsNotifier(clock=cluster, policy=policy, default=Route(dingtalk=dingtalk.DingTalkRobot(robot.url, "x")))
    result = bad.notify("alice", "s", "[GPU Steward] nb: idle", job_id="nb")
    assert result.status == "error" and "310000" in result.detail


def test_callback_refuses_forged_stale_future_and_replayed_requests():
    world = World()
    assert world.say("staff-alice", "hello", secret="forged-secret").status_code == 401
    assert world.say("staff-alice", "hello", ts_ms=int((NOW - 3601) * 1000)).status_code == 401
    assert world.say("staff-alice", "hello", ts_ms=int((NOW + 600) * 1000)).status_code == 401
    ok = world.say("staff-alice", "hello", ts_ms=int((NOW - 10) * 1000))
    assert ok.status_code == 200 and ok.json()["msgtype"] == "text"
    assert world.say("staff-alice", "hello", ts_ms=int((NOW - 10) * 1000)).status_code == 401  # replayed
    assert world.client.post("/webhooks/dingtalk", json={"text": {"content": "x"}}).status_code == 401


def test_keep_from_owner_makes_the_guardrail_refuse_the_stop():
    world = World()
    world.sweep_at(65)  # alice is warned
    reply = world.say("staff-alice", "keep 4h running the demo tonight").json()["text"]["content"]
    assert "ml-team/notebook" in reply and "running the demo tonight" in reply
    exemption = world.deps.audit.entries(kind="exemption")[0]
    assert exemption.target == "ml-team/notebook" and exemption.data["by"] == "dingtalk:alice"
    world.sweep_at(100, 110)  # past the notice period: would have been stopped
    assert world.cluster.get_job("ml-team/notebook").state == "running"
    facts = fresh_facts(world.deps, "check", "ml-team/notebook", None)
    proposal = ProposedAction(action="terminate", target="ml-team/notebook", reason="idle", finding_kind="idle")
    decision = decide(proposal, facts, world.deps.policy, world.deps.audit.history(world.deps.clock.now()))
    assert decision.verdict == "deny" and decision.rule == "protected"
    assert "running the demo tonight" in decision.reason and "dingtalk:alice" in decision.reason


def test_an_approval_whose_action_the_guardrail_then_blocks_says_so_on_the_page():
    """The approve-link page said only "Done: approved by lead" when the guardrail then refused the forced stop (here:
    its owner kept the job meanwhile); the approver believed it done. The page names what was not carried out."""
    from datetime import timedelta

    world = World()
    approval = world.pending_force_kill()
    now = world.deps.clock.now()
    world.deps.audit.record("exemption", at=now, run_id="chat", target="ml-team/stubborn", status="granted",
                            reason="demo tonight", data={"until": (now + timedelta(hours=4)).isoformat(), "by": "bob"})
    token = world.links.token(approval.id, "approve", NOW, recipient="lead")
    page = world.client.post("/chatops/approve", data={"token": token})
    assert page.status_code == 200 and "approved by lead" in page.text, page.text
    assert "Not carried out: force_terminate ml-team/stubborn was blocked" in page.text, page.text
    assert "未执行：强制停止 ml-team/stubborn" in page.text, page.text
    assert world.cluster.get_job("ml-team/stubborn").state in ("stopping", "running")  # not force-stopped


def test_a_message_holding_nul_is_refused_as_said_and_nothing_is_recorded():
    """A NUL in a chat message was kept on SQLite (the reason written with it) and, on Postgres, answered with a 422
    (no reply at all) and logged as "the cluster could not be read". Refused as said, in the sender's language, before
    anything is parsed or written, whichever store is behind."""
    world = World()
    world.sweep_at(65)
    before = len(world.deps.audit.entries())
    reply = world.say("staff-alice", "keep 4h \u0000 demo").json()["text"]["content"]
    assert reply.startswith("Not taken: the message holds a NUL character"), reply
    zh = world.say("staff-alice", "保留 4h \u0000 演示").json()["text"]["content"]
    assert zh.startswith("未受理：消息中含有 NUL 字符"), zh
    assert len(world.deps.audit.entries()) == before and not world.deps.audit.entries(kind="exemption")


def test_keep_from_someone_else_is_refused_and_chinese_gets_chinese():
    world = World()
    world.sweep_at(65)
    reply = world.say("staff-bob", "保留 4h ml-team/notebook 帮同事").json()["text"]["content"]
    assert "只有作业所有者 alice" in reply
    assert world.deps.audit.entries(kind="exemption") == []
    # DingTalk does not sign the sender, so a message that claims an approver gets an owner's rights only: an
    # approver's keep (any job, up to 30 days) would be a forged sender's for the asking.
    reply = world.say("staff-lead", "keep 2h ml-team/notebook approved by lead").json()["text"]["content"]
    assert reply.startswith("Only alice") and "use WeCom or the web UI" in reply, reply
    assert world.deps.audit.entries(kind="exemption") == []


def test_dingtalk_never_answers_an_approval_and_a_captured_callback_is_never_taken_twice(tmp_path):
    """Finding 1: DingTalk signs the timestamp, not the body, so `approve <id>` there is refused (and audited),
    whoever it claims to come from; a captured (timestamp, sign) is refused 11 minutes later and after a restart."""
    world = World(data_dir=tmp_path)
    approval = world.pending_force_kill()
    captured, status_body = world.signed("staff-alice", "status?")
    assert world.client.post("/webhooks/dingtalk", json=status_body, headers=captured).status_code == 200

    refused = world.say("staff-lead", f"approve {approval.id} confirmed idle").json()["text"]["content"]
    assert refused.startswith("Not taken") and "DingTalk does not sign" in refused and "#approvals" in refused
    assert "未受理" in world.say("staff-lead", f"批准 {approval.id}").json()["text"]["content"]
    assert world.deps.approvals.get(approval.id).status == "pending"
    audited = world.deps.audit.entries(kind="approval", status="refused_answer")
    assert [e.data["claimed_sender"] for e in audited] == ["staff-lead", "staff-lead"]

    forged = {**status_body, "senderStaffId": "staff-lead", "text": {"content": f"approve {approval.id}"}}
    world.now += 11 * 60  # past the old in-memory replay window, well inside the accepted hour
    assert world.client.post("/webhooks/dingtalk", json=forged, headers=captured).status_code == 401
    world.start()  # a restarted server over the same data dir
    assert world.client.post("/webhooks/dingtalk", json=forged, headers=captured).status_code == 401
    assert world.deps.approvals.get(approval.id).status == "pending"
    assert world.cluster.get_job("ml-team/stubborn").state != "cancelled"
    assert not [e for e in world.deps.audit.entries(kind="execution", target=approval.target)
                if e.action == approval.action]


def test_dingtalk_checks_the_signature_before_reading_the_body():
    """Finding 4: a bad signature is 401 whatever the body (it is not parsed: no 422 for junk); a bad body with
    a good signature is 422; fields are bounded (a text over the limit is answered with a reply naming it)."""
    world = World()
    junk = b"\xff{not json"
    assert world.client.post("/webhooks/dingtalk", content=junk, headers={"timestamp": "1", "sign": "x"}).status_code == 401
    headers, _ = world.signed("staff-alice", "hi")
    assert world.client.post("/webhooks/dingtalk", content=junk, headers=headers).status_code == 422
    headers, body = world.signed("staff-alice", "x" * 5000)
    too_long = world.client.post("/webhooks/dingtalk", json=body, headers=headers)
    assert too_long.status_code == 200 and "at most 4000 characters" in too_long.json()["text"]["content"]
    headers, nick = world.signed("staff-alice", "hi")
    nick["senderNick"] = "n" * 300
    assert world.client.post("/webhooks/dingtalk", json=nick, headers=headers).status_code == 422
    ts = str(int(world.now * 1000))
    for bad in ({"timestamp": ts, "sign": b"\xff" * 44}, {"timestamp": "nan", "sign": "x"}, {"timestamp": f" {ts}",
                                                                                         "sign": "x"}):
        response = world.client.post("/webhooks/dingtalk", json=body, headers=bad)
        assert response.status_code == 401, (bad, response.text)


def test_other_questions_get_the_injected_answer_or_a_findings_summary():
    world = World()
    world.sweep_at(65)
    summary = world.say("staff-alice", "who is wasting GPUs?").json()["text"]["content"]
    assert "ml-team/notebook: idle" in summary and "keep 4h" in summary
    # DingTalk does not sign its senders: the hint invites no `approve <id>` it would then refuse.
    assert "approve <id>" not in summary and "buttons on its card" in summary
    zh = world.say("staff-alice", "谁在浪费 GPU？").json()["text"]["content"]
    assert "approve <id>" not in zh and "审批卡片" in zh
    app = FastAPI()
    app.include_router(chatops_router(world.settings, lambda: world.service, now_s=lambda: NOW,
                                      answer=lambda q, user, lang: f"{user}/{lang}: {q}"))
    world.client = TestClient(app)
    assert world.say("staff-alice", "今天做了什么").json()["text"]["content"] == "alice/zh: 今天做了什么"


def test_signed_approve_link_acts_once_and_refuses_tampered_expired_and_reused():
    world = World()
    approval = world.pending_force_kill()
    token = world.links.token(approval.id, "approve", NOW, recipient="lead")
    page = world.client.get("/chatops/approve", params={"token": token})
    assert page.status_code == 200 and "<form" in page.text
    assert world.deps.approvals.get(approval.id).status == "pending"  # GET never acts
    payload, mac = token.split(".")
    forged = base64.urlsafe_b64encode(base64.urlsafe_b64decode(payload + "==").replace(b'"approve"', b'"deny"'))
    tampered = forged.rstrip(b"=").decode() + "." + mac
    assert world.client.post("/chatops/approve", data={"token": tampered}).status_code == 403
    expired = world.links.token(approval.id, "approve", NOW - 7200, recipient="lead")
    assert world.client.get("/chatops/approve", params={"token": expired}).status_code == 403
    done = world.client.post("/chatops/approve", data={"token": token, "reason": "ok"})
    assert done.status_code == 200 and world.deps.approvals.get(approval.id).status == "approved"
    assert world.deps.approvals.get(approval.id).answered_by == "link:lead"
    assert world.client.post("/chatops/approve", data={"token": token}).status_code == 410
    assert world.client.get("/chatops/approve", params={"token": token}).status_code == 410


def test_unbound_link_needs_a_named_approver():
    world = World(approvers=("lead",))
    approval = world.pending_force_kill()
    token = world.links.token(approval.id, "deny", NOW)
    assert world.client.post("/chatops/approve", data={"token": token, "by": "mallory"}).status_code == 403
    assert world.client.post("/chatops/approve", data={"token": token, "by": "lead"}).status_code == 200
    assert world.deps.approvals.get(approval.id).status == "denied"
    # With no approvers configured, an unbound link names nobody who may answer: refused, whatever name is typed.
    open_world = World(approvers=())
    approval = open_world.pending_force_kill()
    token = open_world.links.token(approval.id, "approve", NOW)
    assert open_world.client.post("/chatops/approve", data={"token": token, "by": "anyone"}).status_code == 403
    assert open_world.deps.approvals.get(approval.id).status == "pending"


def test_a_chat_id_that_names_a_mapped_user_does_not_speak_for_them():
    """WeCom ids and cluster logins are often the same pinyin: `bob` on WeCom is not the cluster's bob when the
    cluster's bob is mapped to `wc-bob`, neither as an approver nor as a job's owner."""
    from agent.chatops.directory import UserDirectory

    d = UserDirectory(users={"bob": {"wecom": "wc-bob"}, "carol": {"wecom": "wc-carol"}}, approvers=["bob"])
    assert d.cluster_user("wecom", "wc-bob") == "bob" and d.is_approver("wecom", "wc-bob")
    assert d.cluster_user("wecom", "bob") == "unverified:bob" and not d.is_approver("wecom", "bob")
    assert d.cluster_user("wecom", "carol") == "unverified:carol"
    # An id nobody is mapped to still speaks for the cluster user of its name (no directory entry to contradict it).
    assert d.cluster_user("wecom", "dave") == "dave" and d.cluster_user("dingtalk", "bob") == "bob"


def test_approval_card_listener_posts_action_card_with_signed_links(robot):
    world = World()
    approval = world.pending_force_kill()
    listener = approval_card_listener(Route(dingtalk=dingtalk.DingTalkRobot(robot.url, robot.secret)), world.links,
                                      now_s=lambda: NOW)
    listener(type("Event", (), {"kind": "approval_requested", "approval": approval})())
    card = robot.messages[-1]["actionCard"]
    assert approval.id in card["text"]
    approve_url = card["btns"][0]["actionURL"]
    token = urllib.parse.parse_qs(urllib.parse.urlsplit(approve_url).query)["token"][0]
    assert world.links.verify(token, NOW).d == "approve"
    # The buttons answer until the card's "Answer by" (they died after CHATOPS_LINK_TTL_S, an hour, of four).
    deadline = approval.expires_at.timestamp()
    assert deadline - NOW > world.links.ttl_s
    assert world.links.verify(token, deadline - 60).d == "approve"
    with pytest.raises(LinkRefused):
        world.links.verify(token, deadline + 60)


def test_approve_link_garbage_is_refused_not_500():
    """Finding 8: `token=\\xff` and friends on /chatops/approve were 500s; now each is refused with a page."""
    world = World(approvers=("lead",))
    approval = world.pending_force_kill()
    token = world.links.token(approval.id, "deny", NOW)
    payload = token.split(".")[0]
    for bad in ("\xff", f"{payload}.\xff", f"{payload}.ÿÿ", "a.b.c", "", "x" * 5000):
        page = world.client.get("/chatops/approve", params={"token": bad})
        # A page for a person, never a JSON validation error (an empty or overlong link was a 422 JSON body).
        assert page.status_code in (400, 403) and "text/html" in page.headers["content-type"], (bad[:40], page.text)
        assert world.client.post("/chatops/approve", data={"token": bad, "by": "lead"}).status_code in (400, 403)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    raw = world.client.post("/chatops/approve", content=b"token=\xff&by=lead", headers=form)
    assert raw.status_code == 400 and "UTF-8" in raw.text
    long = world.client.post("/chatops/approve", data={"token": token, "by": "lead", "reason": "r" * 3000})
    assert long.status_code == 400 and world.deps.approvals.get(approval.id).status == "pending"
    assert world.client.post("/chatops/approve", data={"token": token, "by": "lead"}).status_code == 200


def test_a_store_that_cannot_be_written_takes_no_callback_and_no_link(tmp_path):
    """The replay and link stores held by another writer: nothing is taken unremembered (503), nothing acts;
    once the lock is gone the next callback and the link work."""
    import sqlite3

    world = World(data_dir=tmp_path, approvers=("lead",))
    approval = world.pending_force_kill()
    token = world.links.token(approval.id, "deny", NOW)
    holders = [sqlite3.connect(tmp_path / name, isolation_level=None)
               for name in ("chatops-callbacks.sqlite", "chatops-links.sqlite")]
    for holder in holders:
        holder.execute("BEGIN IMMEDIATE")  # another writer holds each store's write lock
    try:
        busy = world.say("staff-alice", "keep 4h ml-team/notebook demo")
        assert busy.status_code == 503 and "locked" in busy.json()["detail"]
        page = world.client.post("/chatops/approve", data={"token": token, "by": "lead"})
        assert page.status_code == 503 and world.deps.approvals.get(approval.id).status == "pending"
        assert world.deps.audit.entries(kind="exemption") == []
    finally:
        for holder in holders:
            holder.rollback()
    assert world.say("staff-alice", "hello").status_code == 200
    assert world.client.post("/chatops/approve", data={"token": token, "by": "lead"}).status_code == 200
    assert world.deps.approvals.get(approval.id).status == "denied"


def test_a_link_whose_answer_was_not_taken_still_answers_once_the_store_is_back(tmp_path):
    """The approval store locked (another writer, a backup): the link's answer is not taken (503, naming the cause,
    "the request stays open"), its nonce is given back, and the same button answers once the store is back (it was
    410 "link already used": spent before the answer was recorded)."""
    import sqlite3

    from pydantic import SecretStr

    from server import chatops_wiring, create_app
    from tests.test_server_api import START, advance, settings_for

    settings = settings_for(tmp_path, wecom_token=SecretStr("wecom-token"), wecom_aes_key=SecretStr("a" * 43),
                            wecom_corp_id="ww-corp", chatops_link_secret=SecretStr(secrets.token_urlsafe(24)),
                            chatops_public_url="http://localhost", chatops_approvers=["lead"])
    routers, _ = chatops_wiring(settings)
    app = create_app(settings, speed=0, start_s=START, run_scheduler=False, extra_routers=routers)
    with TestClient(app, base_url="http://localhost") as client:
        advance(client, 300)
        approval_id = client.post("/api/sweeps").json()["approvals_opened"][0]
        token = routers[0].links.token(approval_id, "approve", time.time())  # the card's Approve button
        store = app.state.runtime.deps.approvals

        holder = sqlite3.connect(tmp_path / "approvals.sqlite", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the approval store (a backup, a CLI answer)
        try:
            first = client.post("/chatops/approve", data={"token": token, "by": "lead"})
        finally:
            holder.rollback()
            holder.close()
        assert store.get(approval_id).status == "pending"
        # 503 (the store cannot be written), as the API and the callbacks answer; not a 409 conflict
        assert first.status_code == 503, first.status_code
        assert "stays open" in first.text and "仍待处理" in first.text and "locked" in first.text

        again = client.post("/chatops/approve", data={"token": token, "by": "lead"})
        assert again.status_code == 200, again.text[-200:]
        assert store.get(approval_id).status == "approved"
        assert client.post("/chatops/approve", data={"token": token, "by": "lead"}).status_code == 410  # once only


def test_a_link_used_by_someone_who_is_not_an_approver_is_audited_like_every_other_refused_answer():
    """A genuine link (a card forwarded outside the approvers' group) tried under a name that is not an approver:
    refused (403) and audited as approval / refused_answer, as a viewer's API answer and a WeCom or DingTalk
    non-approver are; the link stays usable by an approver."""
    world = World(approvers=("lead",))
    approval = world.pending_force_kill()  # a level-3 forced stop waits for a human
    token = world.links.token(approval.id, "approve", NOW)
    refused = world.client.post("/chatops/approve", data={"token": token, "by": "mallory",
                                                          "reason": "forwarded to me"})
    assert refused.status_code == 403 and world.deps.approvals.get(approval.id).status == "pending"
    nameless = world.client.post("/chatops/approve", data={"token": token})
    assert nameless.status_code == 403

    attempts = [e for e in world.deps.audit.entries(kind="approval", limit=100)
                if e.status == "refused_answer" and e.data.get("approval_id") == approval.id]
    assert len(attempts) == 2, attempts
    mallory = [e for e in attempts if e.data.get("claimed_sender") == "mallory"]
    assert mallory and "mallory" in (mallory[0].reason or "") and mallory[0].data["decision"] == "approve"
    assert world.client.post("/chatops/approve", data={"token": token, "by": "lead"}).status_code == 200


def test_an_over_long_dingtalk_message_gets_a_reply_naming_the_limit_like_wecom():
    """A message over 4000 characters (a `keep` with a pasted log) is answered with a reply naming the limit, in
    both languages, as WeCom answers it; a 422 to DingTalk's server showed the person nothing."""
    world = World()
    reply = world.say("staff-alice", "keep 4h ml-team/notebook demo tonight, context: " + "x" * 4100)
    assert reply.status_code == 200, f"{reply.status_code} {reply.text[:200]} (DingTalk shows nothing for a non-200)"
    text = reply.json()["text"]["content"]
    assert "at most 4000 characters" in text and "最多 4000 个字符" in text, text
    assert world.deps.audit.entries(kind="exemption") == []  # and nothing was done
    exactly = world.say("staff-alice", "keep 4h ml-team/notebook " + "y" * (4000 - len("keep 4h ml-team/notebook ")))
    assert exactly.status_code == 200 and "4000" not in exactly.json()["text"]["content"]


def test_a_callback_first_taken_at_the_future_skew_edge_cannot_be_replayed_at_the_age_edge():
    """The age is checked in whole milliseconds, the key's seen-time kept to the microsecond: a callback taken with
    its clock a minute ahead was forgotten just under a millisecond before it was too old to be taken again."""
    world = World()
    ts_ms = 1_750_000_000_000
    headers = {"timestamp": str(ts_ms), "sign": dingtalk.sign(str(ts_ms), world.app_secret)}
    body = {"msgtype": "text", "text": {"content": "status?"}, "senderStaffId": "staff-alice"}
    world.now = (ts_ms - dingtalk.CALLBACK_FUTURE_SKEW_MS) / 1000 + 0.0004  # the sender's clock is 60 s ahead
    assert world.client.post("/webhooks/dingtalk", json=body, headers=headers).status_code == 200
    world.now = (ts_ms + dingtalk.CALLBACK_MAX_AGE_MS) / 1000 + 0.0009  # an hour old to the millisecond: accepted
    again = world.client.post("/webhooks/dingtalk", json=body, headers=headers)
    assert again.status_code == 401 and "replayed" in again.text


def test_a_spent_or_expired_link_used_is_audited_like_every_other_refused_answer():
    """A genuine link (its signature holds) used again, by anyone, or after it expired, was refused (410, 403)
    with no audit entry; only a non-approver's use was audited. A GET (a link previewer) is not an answer."""
    world = World(approvers=("lead",))
    approval = world.pending_force_kill()

    def attempts() -> list:
        return [e for e in world.deps.audit.entries(kind="approval", limit=100)
                if e.status == "refused_answer" and e.data.get("approval_id") == approval.id]

    expired = world.links.token(approval.id, "deny", NOW - 7200)
    assert world.client.get("/chatops/approve", params={"token": expired}).status_code == 403
    assert attempts() == []
    assert world.client.post("/chatops/approve", data={"token": expired, "by": "lead"}).status_code == 403
    [late] = attempts()
    assert late.data["decision"] == "deny" and late.data["claimed_sender"] == "lead" and "expired" in late.reason

    token = world.links.token(approval.id, "approve", NOW)
    assert world.client.post("/chatops/approve", data={"token": token, "by": "lead"}).status_code == 200
    assert world.client.get("/chatops/approve", params={"token": token}).status_code == 410
    assert len(attempts()) == 1
    again = world.client.post("/chatops/approve", data={"token": token, "by": "mallory"})
    assert again.status_code == 410
    reused = [e for e in attempts() if e.data["claimed_sender"] == "mallory"]
    assert len(reused) == 1 and "already used" in reused[0].reason and reused[0].data["decision"] == "approve"
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")  # no genuine claim: nothing to audit
    assert world.client.post("/chatops/approve", data={"token": forged, "by": "lead"}).status_code == 403
    assert len(attempts()) == 2


@pytest.mark.parametrize("text", ["批准{id}", "批准：{id}", "ａｐｐｒｏｖｅ {id}", "approve\u200b {id}", "批准"])
def test_a_dingtalk_answer_in_any_wording_is_refused_and_says_so(text):
    """DingTalk never answers an approval (its sender is not signed); a Chinese or full-width wording of one was a
    findings summary, as if nothing had been asked, and the attempt was not audited."""
    world = World()
    approval = world.pending_force_kill()
    reply = world.say("staff-lead", text.format(id=approval.id)).json()["text"]["content"]
    assert "未受理" in reply or "Not taken" in reply, reply
    assert world.deps.approvals.get(approval.id).status == "pending"
    audited = [e for e in world.deps.audit.entries(kind="approval", status="refused_answer")
               if e.data.get("approval_id") == approval.id]
    assert len(audited) == (0 if text == "批准" else 1)
