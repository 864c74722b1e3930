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
