"""`steward serve` mounts the ChatOps webhooks only when a ChatOps setting is present."""

from __future__ import annotations

from pydantic import SecretStr

from agent.config.settings import Settings
from server import chatops_wiring


def test_no_chatops_settings_no_webhooks(tmp_path):
    assert chatops_wiring(Settings(data_dir=tmp_path)) == ([], [])


def test_dingtalk_settings_mount_the_webhooks_and_approval_cards(tmp_path):
    settings = Settings(data_dir=tmp_path, dingtalk_webhook_url="http://127.0.0.1:9/robot/send?access_token=t",
                        dingtalk_secret=SecretStr("s"), dingtalk_app_secret=SecretStr("a"),
                        chatops_link_secret=SecretStr("a-test-link-secret-0123456789"), chatops_public_url="http://127.0.0.1:8000")
    routers, listeners = chatops_wiring(settings)
    paths = {route.path for route in routers[0].routes}
    assert {"/webhooks/dingtalk", "/chatops/approve"} <= paths
    assert len(listeners) == 1


def test_a_question_asked_in_dingtalk_is_answered_as_the_web_chat_answers_it(tmp_path):
    """`steward serve` wired no answerer into ChatOps: every question got the same findings summary. A question in
    the chat now reaches the built-in answerer with the server's cluster reading, in plain text."""
    import time

    from agent.chatops import dingtalk
    from tests.test_server_api import client_for, settings_for

    settings = settings_for(tmp_path).model_copy(update={"dingtalk_app_secret": SecretStr("app-secret")})
    routers, _ = chatops_wiring(settings)
    with client_for(settings, extra_routers=routers) as client:
        client.post("/api/sweeps")

        def say(text: str) -> str:
            ts = str(int(time.time() * 1000))
            body = {"msgtype": "text", "text": {"content": text}, "senderStaffId": "staff-carol",
                    "conversationId": "cid"}
            reply = client.post("/webhooks/dingtalk", json=body,
                                headers={"timestamp": ts, "sign": dingtalk.sign(ts, "app-secret")})
            assert reply.status_code == 200, reply.text
            time.sleep(0.002)  # each (timestamp, sign) is taken once
            return reply.json()["text"]["content"]

        pools = say("哪个节点池晚上空闲？")
        assert "a100-ondemand" in pools and "**" not in pools, pools
        cost = say("what did each team spend this week?")
        assert "By team:" in cost, cost
