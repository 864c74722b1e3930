"""WeCom (企业微信) ChatOps: callback crypto against an independently built reference, URL verification,
encrypted messages and replies, refusals, and the group robot.

No real WeCom is reached. The reference vectors are built here by hand from WeCom's published
scheme (sha1 of the sorted strings; AES-256-CBC, IV = key[:16]; random(16) + length (4 bytes,
network order) + message + corp id; PKCS#7 to 32 bytes), not with the code under test. The
group robot is a loopback server that takes `key` in the URL like qyapi.weixin.qq.com.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import struct
import threading
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from fastapi import FastAPI
from fastapi.testclient import TestClient

from agent.chatops import wecom
from agent.chatops.links import UsedNonces
from agent.chatops.replay import SeenCallbacks
from agent.chatops.router import chatops_router
from agent.chatops.wecom_crypto import WeComCrypto, WeComCryptoError
from agent.config.policy import Policy
from agent.config.settings import Settings
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from sim.scenario import parse_scenario
from tests.conftest import free_port
from tests.loopback import send_json, send_page
from tests.test_dingtalk import SCENARIO

NOW = 1_750_000_000


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()[:43]


def ref_encrypt(aes_key43: str, message: str, corp_id: str) -> str:
    key = base64.b64decode(aes_key43 + "=")
    plain = os.urandom(16) + struct.pack(">I", len(message.encode())) + message.encode() + corp_id.encode()
    pad = 32 - len(plain) % 32
    plain += bytes([pad]) * pad
    enc = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(enc.update(plain) + enc.finalize()).decode()


def ref_decrypt(aes_key43: str, encrypted: str) -> tuple[str, str]:
    key = base64.b64decode(aes_key43 + "=")
    dec = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    plain = dec.update(base64.b64decode(encrypted)) + dec.finalize()
    plain = plain[:-plain[-1]]
    (n,) = struct.unpack(">I", plain[16:20])
    return plain[20:20 + n].decode(), plain[20 + n:].decode()


def ref_sign(*parts: str) -> str:
    return hashlib.sha1("".join(sorted(parts)).encode()).hexdigest()


def test_crypto_matches_the_reference_both_ways():
    key, corp = _key(), "ww" + secrets.token_hex(8)
    crypto = WeComCrypto("tok", key, corp)
    assert crypto.decrypt(ref_encrypt(key, "<xml>你好 hello</xml>", corp)) == "<xml>你好 hello</xml>"
    assert ref_decrypt(key, crypto.encrypt("回复 reply")) == ("回复 reply", corp)
    assert crypto.sign("1", "n", "E") == ref_sign("tok", "1", "n", "E")
    with pytest.raises(WeComCryptoError, match="another corp"):
        crypto.decrypt(ref_encrypt(key, "x", "ww-other"))
    with pytest.raises(WeComCryptoError):
        WeComCrypto("tok", _key(), corp).decrypt(ref_encrypt(key, "x" * 40, corp))


class Callback:
    def __init__(self) -> None:
        self.token, self.key, self.corp = secrets.token_hex(8), _key(), "ww" + secrets.token_hex(8)
        self.deps, self.cluster = simulated_deps(parse_scenario(SCENARIO), Policy(), PolicyModel())
        self.service = SweepService(self.deps)
        settings = Settings(wecom_token=self.token, wecom_aes_key=self.key, wecom_corp_id=self.corp,
                            chatops_approvers=["lead"])
        app = FastAPI()
        app.include_router(chatops_router(settings, lambda: self.service, now_s=lambda: NOW,
                                          used_nonces=UsedNonces(), seen_callbacks=SeenCallbacks(keep_s=600)))
        self.client = TestClient(app)

    def encrypted_post(self, inner: str, **kw):
        """A genuine callback (signed, encrypted for this corp) whose plaintext is `inner`, whatever it is."""
        encrypted = ref_encrypt(self.key, inner, self.corp)
        body = f"<xml><ToUserName><![CDATA[{self.corp}]]></ToUserName><Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>"
        return self.client.post("/webhooks/wecom", params=self.params(encrypted, **kw), content=body)

    def params(self, encrypted: str, *, ts: int = NOW, nonce: str | None = None, token: str | None = None) -> dict:
        nonce = nonce or secrets.token_hex(6)
        return {"msg_signature": ref_sign(token or self.token, str(ts), nonce, encrypted), "timestamp": str(ts),
                "nonce": nonce}

    def post(self, user: str, content: str, **kw):
        inner = (f"<xml><ToUserName><![CDATA[{self.corp}]]></ToUserName><FromUserName><![CDATA[{user}]]>"
                 f"</FromUserName><CreateTime>{NOW}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
                 f"<Content><![CDATA[{content}]]></Content><AgentID>1000002</AgentID></xml>")
        return self.encrypted_post(inner, **kw)

    def reply_text(self, response) -> str:
        env = {c.tag: c.text for c in ET.fromstring(response.text)}
        assert env["MsgSignature"] == ref_sign(self.token, env["TimeStamp"], env["Nonce"], env["Encrypt"])
        inner, corp = ref_decrypt(self.key, env["Encrypt"])
        assert corp == self.corp
        return {c.tag: c.text for c in ET.fromstring(inner)}["Content"]


def test_url_verification_echoes_and_refuses_forged_stale_and_replayed():
    cb = Callback()
    echostr = ref_encrypt(cb.key, "echo-1234567890", cb.corp)
    params = cb.params(echostr)
    ok = cb.client.get("/webhooks/wecom", params={**params, "echostr": echostr})
    assert ok.status_code == 200 and ok.text == "echo-1234567890"
    assert cb.client.get("/webhooks/wecom", params={**params, "echostr": echostr}).status_code == 401  # replay
    forged = cb.params(echostr, token="not-the-token")
    assert cb.client.get("/webhooks/wecom", params={**forged, "echostr": echostr}).status_code == 401
    stale = cb.params(echostr, ts=NOW - 3600)
    assert cb.client.get("/webhooks/wecom", params={**stale, "echostr": echostr}).status_code == 401
    other = ref_encrypt(cb.key, "echo", "ww-someone-else")
    assert cb.client.get("/webhooks/wecom", params={**cb.params(other), "echostr": other}).status_code == 401


def test_message_keep_gets_an_encrypted_reply_and_an_exemption():
    cb = Callback()
    cb.cluster.advance_to(65 * 60)
    cb.service.sweep()
    response = cb.post("alice", "keep 4h 今晚演示 ml-team/notebook")
    assert response.status_code == 200
    assert "ml-team/notebook" in cb.reply_text(response)
    exemption = cb.deps.audit.entries(kind="exemption")[0]
    assert exemption.target == "ml-team/notebook" and exemption.data["by"] == "wecom:alice"


def test_forged_and_replayed_messages_are_refused():
    cb = Callback()
    assert cb.post("alice", "hi", token="forged").status_code == 401
    assert cb.post("alice", "hi", ts=NOW + 3600).status_code == 401
    encrypted = ref_encrypt(cb.key, _text_xml(cb, "alice", "hi"), cb.corp)
    captured = {"params": cb.params(encrypted, nonce="n1"), "content": _envelope(cb, encrypted)}
    assert cb.client.post("/webhooks/wecom", **captured).status_code == 200
    assert cb.client.post("/webhooks/wecom", **captured).status_code == 401  # the same request, played again
    doctype = "<!DOCTYPE x [<!ENTITY a 'b'>]><xml><Encrypt>&a;</Encrypt></xml>"
    assert cb.client.post("/webhooks/wecom", params=cb.params("b"), content=doctype).status_code == 400


def _text_xml(cb: Callback, user: str, content: str) -> str:
    return (f"<xml><ToUserName><![CDATA[{cb.corp}]]></ToUserName><FromUserName><![CDATA[{user}]]></FromUserName>"
            f"<CreateTime>{NOW}</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA[{content}]]>"
            "</Content><AgentID>1000002</AgentID></xml>")


def _envelope(cb: Callback, encrypted: str) -> str:
    return f"<xml><ToUserName><![CDATA[{cb.corp}]]></ToUserName><Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>"


def _sorted_first(make):  # noqa: ANN001, ANN202
    """make() until what it makes sorts after the timestamp and the nonce (so the nonce, then the timestamp, lead
    the signed string)."""
    while (made := make())[0] <= "1":
        pass
    return made


def test_a_captured_callback_replayed_with_its_fields_resplit_is_refused():
    """The signature is sha1 of the sorted fields joined with no separator: moving the nonce's trailing `0` to the
    front of the timestamp keeps the signature and the timestamp's value. The replay key was (timestamp, nonce),
    so the very request captured was taken twice. Keyed on the signature, and a timestamp with a leading zero
    refused, it is a replay."""
    cb = Callback()
    while cb.token[0] <= "1":  # the token sorts after the timestamp too
        cb = Callback()
    encrypted = _sorted_first(lambda: ref_encrypt(cb.key, _text_xml(cb, "alice", "what is idle now?"), cb.corp))
    signature = ref_sign(cb.token, str(NOW), "0010", encrypted)
    first = cb.client.post("/webhooks/wecom", params={"msg_signature": signature, "timestamp": str(NOW),
                                                      "nonce": "0010"}, content=_envelope(cb, encrypted))
    assert first.status_code == 200
    resplit = {"msg_signature": signature, "timestamp": "0" + str(NOW), "nonce": "001"}
    assert ref_sign(cb.token, resplit["timestamp"], resplit["nonce"], encrypted) == signature  # still genuine
    assert cb.client.post("/webhooks/wecom", params=resplit, content=_envelope(cb, encrypted)).status_code == 401
    # in upper case (the signature is compared in lower case): the same signature, the same key
    again = {"msg_signature": signature.upper(), "timestamp": str(NOW), "nonce": "0010"}
    assert cb.client.post("/webhooks/wecom", params=again, content=_envelope(cb, encrypted)).status_code == 401

    echo = _sorted_first(lambda: ref_encrypt(cb.key, "echo-" + secrets.token_hex(4), cb.corp))
    signature = ref_sign(cb.token, str(NOW), "00", echo)
    verified = cb.client.get("/webhooks/wecom", params={"msg_signature": signature, "timestamp": str(NOW),
                                                        "nonce": "00", "echostr": echo})
    assert verified.status_code == 200
    replayed = cb.client.get("/webhooks/wecom", params={"msg_signature": signature, "timestamp": "0" + str(NOW),
                                                        "nonce": "0", "echostr": echo})
    assert replayed.status_code == 401


def test_a_timestamp_with_a_leading_zero_is_refused_even_freshly_signed():
    cb = Callback()
    encrypted = ref_encrypt(cb.key, _text_xml(cb, "alice", "hi"), cb.corp)
    params = {"msg_signature": ref_sign(cb.token, "0" + str(NOW), "n2", encrypted), "timestamp": "0" + str(NOW),
              "nonce": "n2"}
    refused = cb.client.post("/webhooks/wecom", params=params, content=_envelope(cb, encrypted))
    assert refused.status_code == 401 and "whole number" in refused.text


def _pending(cb: Callback):  # noqa: ANN202
    for minute in (65, 130, 140, 150):  # warned at 65, stopped after the hour of notice, SIGTERM ignored
        cb.cluster.advance_to(minute * 60)
        cb.service.sweep()
    return next(a for a in cb.deps.approvals.pending() if a.target == "ml-team/stubborn")


@pytest.mark.parametrize("text", ["批准{id}", "批准：{id}", "批准: {id} 确认空闲", "ａｐｐｒｏｖｅ {id}", "approve\u200b {id}",
                                  "approve:{id}", "APPROVE {id}", "批准\u3000{id}"])
def test_an_approvers_answer_in_a_common_wording_is_taken(text):
    """`批准apr_x` (no space, as Chinese is written), `批准：apr_x`, full-width letters, a zero-width space pasted in:
    each was answered with a findings summary, nothing recorded and nothing saying the answer was not taken."""
    cb = Callback()
    approval = _pending(cb)
    reply = cb.reply_text(cb.post("lead", text.format(id=approval.id)))
    done = cb.deps.approvals.get(approval.id)
    assert done.status == "approved" and done.answered_by == "wecom:lead", (text, reply)
    assert approval.id in reply


@pytest.mark.parametrize("text", ["批准", "approve", "deny:", "拒绝：", "批准 ", "approve\u200bapr_x1"])
def test_an_answer_that_does_not_parse_is_told_it_was_not_taken_and_how_to_write_it(text):
    from tests.zh_text import leftovers

    cb = Callback()
    approval = _pending(cb)
    reply = cb.reply_text(cb.post("lead", text))
    assert cb.deps.approvals.get(approval.id).status == "pending"
    if any("\u4e00" <= c <= "\u9fff" for c in text):
        assert reply.startswith("未受理") and "`批准 <编号> [原因]`" in reply and not leftovers(reply), reply
    else:
        assert reply.startswith("Not taken") and "`approve <id> [reason]`" in reply, reply


def test_a_question_that_starts_like_a_verb_is_still_a_question():
    cb = Callback()
    cb.cluster.advance_to(65 * 60)
    cb.service.sweep()
    for text in ("approved yet?", "批准了吗？"):
        reply = cb.reply_text(cb.post("lead", text))
        assert "Not taken" not in reply and "未受理" not in reply, (text, reply)


def test_approve_and_deny_through_wecom_are_for_approvers_only():
    """WeCom signs the encrypted body, sender included: its `approve <id>` is an authenticated answer."""
    cb = Callback()
    for minute in (65, 130, 140, 150):  # warned at 65, stopped after the hour of notice, SIGTERM ignored
        cb.cluster.advance_to(minute * 60)
        cb.service.sweep()
    approval = next(a for a in cb.deps.approvals.pending() if a.target == "ml-team/stubborn")
    refused = cb.reply_text(cb.post("bob", f"approve {approval.id}"))
    assert "Only approvers" in refused and cb.deps.approvals.get(approval.id).status == "pending"
    [attempt] = [e for e in cb.deps.audit.entries(kind="approval", status="refused_answer")
                 if e.data.get("approval_id") == approval.id]  # an attempt is a fact: audited, who and what
    assert attempt.reason == "answer from wecom:bob refused: not an approver" and attempt.data["decision"] == "approve"
    done = cb.reply_text(cb.post("lead", f"approve {approval.id} confirmed idle"))
    assert "approved" in done and cb.deps.approvals.get(approval.id).answered_by == "wecom:lead"
    assert cb.cluster.get_job("ml-team/stubborn").state == "cancelled"
    assert "Not taken" in cb.reply_text(cb.post("lead", f"deny {approval.id}"))


def test_bad_timestamps_bodies_and_plaintexts_are_refused_not_500():
    """Finding 8: timestamp=nan used to skip the freshness check; a signed message whose plaintext is not XML
    (or not UTF-8) was a 500; the outer body is never XML-parsed before the signature holds (finding 4)."""
    cb = Callback()
    encrypted = ref_encrypt(cb.key, "<xml/>", cb.corp)
    body = f"<xml><Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>"
    for ts in ("nan", "inf", "-1", "1e9", " 1750000000"):
        params = {**cb.params(encrypted), "timestamp": ts}
        params["msg_signature"] = ref_sign(cb.token, ts, params["nonce"], encrypted)
        response = cb.client.post("/webhooks/wecom", params=params, content=body)
        assert response.status_code == 401, (ts, response.text)
    not_xml = cb.encrypted_post("this is not xml <")
    assert not_xml.status_code == 400 and "not a WeCom message" in not_xml.json()["detail"]
    assert cb.client.post("/webhooks/wecom", params=cb.params("x"), content=b"\xff\xfe<xml>").status_code == 400
    forged_xml = f"<xml><Encrypt>{encrypted}</Encrypt><Encrypt>{encrypted}</Encrypt></xml>"
    assert cb.client.post("/webhooks/wecom", params=cb.params(encrypted), content=forged_xml).status_code == 400
    bad_sig = {**cb.params(encrypted), "msg_signature": "ÿ" * 40}
    assert cb.client.post("/webhooks/wecom", params=bad_sig, content=body).status_code == 401
    assert "at most 4000 characters" in cb.reply_text(cb.post("alice", "keep 4h " + "x" * 4000))
    assert cb.deps.audit.entries(kind="exemption") == []


class WeComRobotServer:
    """A loopback group robot: POST /cgi-bin/webhook/send?key=…; errcode 93000 for an unknown key. With `page` set,
    it answers that HTML page instead (a proxy's login page, a maintenance page), taking nothing."""

    def __init__(self, key: str) -> None:
        self.key, self.messages = key, []
        self.page: str | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if server.page is not None:
                    send_page(self, server.page)
                    return
                good = self.path == f"/cgi-bin/webhook/send?key={server.key}"
                if good:
                    server.messages.append(body)
                send_json(self, {"errcode": 0, "errmsg": "ok"} if good else
                          {"errcode": 93000, "errmsg": "invalid webhook url"})

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_port}/cgi-bin/webhook/send?key="
        self.url = self.base + key
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_group_robot_sends_markdown_and_cards_and_surfaces_errcode():
    server = WeComRobotServer(secrets.token_hex(8))
    try:
        bot = wecom.WeComRobot(server.base + server.key)
        bot.send(wecom.markdown_message("**idle**", mention_user_ids=["alice"]))
        bot.send(wecom.approval_card("Approve?", "force_terminate x", "", [("Approve", "http://a"), ("Deny", "http://d")],
                                     "http://steward/"))
        assert "<@alice>" in server.messages[0]["markdown"]["content"]
        assert server.messages[1]["template_card"]["jump_list"][1]["url"] == "http://d"
        with pytest.raises(wecom.WeComError) as err:
            wecom.WeComRobot(server.base + "wrong").send(wecom.markdown_message("x"))
        assert err.value.errcode == 93000
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def test_a_callback_that_failed_is_taken_again_when_the_platform_retries_it(monkeypatch):
    """WeCom (and DingTalk) retry a callback that got no good answer. When the command could not be carried out
    (a data store that cannot be written: 503, nothing done), the retry of the same signed request must be taken,
    not refused as a replay: the owner's `keep` was lost."""
    from agent.chatops.commands import ChatCommands
    from agent.records.store import Problem, StoreUnavailable

    cb = Callback()
    cb.cluster.advance_to(65 * 60)
    cb.service.sweep()
    real = ChatCommands.handle
    calls = []

    def flaky(self, *args):  # noqa: ANN001, ANN202
        calls.append(args)
        if len(calls) == 1:
            raise StoreUnavailable(Problem("locked", "audit store is locked"))
        return real(self, *args)

    monkeypatch.setattr(ChatCommands, "handle", flaky)
    encrypted = ref_encrypt(cb.key, _text_xml(cb, "alice", "keep 4h demo ml-team/notebook"), cb.corp)
    request = {"params": cb.params(encrypted, nonce="n-retry"), "content": _envelope(cb, encrypted)}
    with pytest.raises(StoreUnavailable):
        cb.client.post("/webhooks/wecom", **request)
    retry = cb.client.post("/webhooks/wecom", **request)  # the platform's retry: the very same request
    assert retry.status_code == 200 and "ml-team/notebook" in cb.reply_text(retry)
    assert [e.target for e in cb.deps.audit.entries(kind="exemption")] == ["ml-team/notebook"]
    assert cb.client.post("/webhooks/wecom", **request).status_code == 401  # done: a replay
