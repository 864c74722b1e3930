"""An approve link whose answer WAS recorded must stay spent, whatever fails after the write."""
from __future__ import annotations

import secrets
import sqlite3
import time

from fastapi.testclient import TestClient
from pydantic import SecretStr


def test_a_link_whose_answer_was_recorded_stays_spent_when_a_read_after_the_write_fails(tmp_path):
    from server import chatops_wiring, create_app
    from tests.test_server_api import START, advance, settings_for

    settings = settings_for(tmp_path, wecom_token=SecretStr("wecom-token"), wecom_aes_key=SecretStr("a" * 43),
                            wecom_corp_id="ww-corp", chatops_link_secret=SecretStr(secrets.token_urlsafe(24)),
                            chatops_public_url="http://localhost", chatops_approvers=["lead"])
    routers, _ = chatops_wiring(settings)
    app = create_app(settings, speed=0, start_s=START, run_scheduler=False, extra_routers=routers)
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        advance(client, 300)
        approval_id = client.post("/api/sweeps").json()["approvals_opened"][0]
        token = routers[0].links.token(approval_id, "approve", time.time())
        store = app.state.runtime.deps.approvals
        original = store._select

        def flaky_select(where, args):  # the disk errors on the first read after the answer is committed
            rows = original(where, args)
            if any(r.status != "pending" for r in rows):
                raise sqlite3.OperationalError("disk I/O error")
            return rows

        store._select = flaky_select
        first = client.post("/chatops/approve", data={"token": token, "by": "lead"})
        store._select = original
        assert store.get(approval_id).status == "approved"  # the answer IS recorded (and will be carried out)
        # ... so the page must not be a bare error telling nothing, and the link must stay spent:
        page = client.get("/chatops/approve", params={"token": token})
        assert page.status_code == 410, (
            f"answer recorded, yet the POST answered {first.status_code} {first.text[:120]!r} and gave the nonce "
            f"back: GET shows the Approve form again ({page.status_code})")
