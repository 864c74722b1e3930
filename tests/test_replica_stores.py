"""The webhook-side stores any replica writes to behave the same on SQLite and on a real Postgres
(STEWARD_DATABASE_URL): ChatOps callback replay protection, single-use approval links, and alert incidents.
"Two replicas" are two store objects with their own connections to one database, as two processes would have:
a callback, a link or an alert taken by one is known to the other."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from agent.alerts.incidents import Alert
from agent.alerts.store import IncidentStore
from agent.chatops.links import LinkClaim, LinkRefused, UsedNonces
from agent.chatops.replay import SeenCallbacks
from tests.test_postgres_stores import where  # noqa: F401  (the sqlite / postgres fixture)

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def test_a_callback_taken_by_one_replica_is_a_replay_on_the_other(where):  # noqa: F811
    first, second = (SeenCallbacks(where("chatops-callbacks"), keep_s=3600) for _ in range(2))
    assert first.problem is None and second.problem is None
    assert first.first_use("dingtalk:1750000000000:sig", 1000.0)
    assert not second.first_use("dingtalk:1750000000000:sig", 1001.0)  # the same request played to replica 2
    assert second.first_use("dingtalk:1750000000001:sig2", 1002.0)
    assert not first.first_use("dingtalk:1750000000001:sig2", 1003.0)
    # Forgotten only after keep_s, when the platform would refuse the request as too old anyway.
    assert second.first_use("dingtalk:1750000000000:sig", 1000.0 + 3601 + 1)


def test_dingtalk_and_wecom_callbacks_are_taken_once_on_every_store(where):  # noqa: F811
    """On Postgres every DingTalk and WeCom callback, the URL check included, was a 422: the replay keys held NUL
    separators, which Postgres text refuses. The keys are printable; a replay is still refused, on both stores."""
    import secrets

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from agent.chatops import dingtalk
    from agent.chatops.router import WECOM_REPLAY_KEEP_S, chatops_router
    from agent.config.settings import Settings
    from tests.test_wecom import _key, ref_encrypt, ref_sign

    now = 1_750_000_000.0
    app_secret, token, aes, corp = secrets.token_urlsafe(24), secrets.token_hex(8), _key(), "ww" + secrets.token_hex(8)
    settings = Settings(dingtalk_app_secret=app_secret, wecom_token=token, wecom_aes_key=aes, wecom_corp_id=corp)
    seen = SeenCallbacks(where("chatops-callbacks"), keep_s=max(dingtalk.REPLAY_KEEP_S, WECOM_REPLAY_KEEP_S))
    app = FastAPI()
    app.include_router(chatops_router(settings, answer=lambda question, user, lang: "ok", seen_callbacks=seen,
                                      used_nonces=UsedNonces(), now_s=lambda: now))
    client = TestClient(app)
    ts = str(int(now * 1000))
    ding = {"json": {"msgtype": "text", "text": {"content": "hello"}, "senderStaffId": "staff-1"},
            "headers": {"timestamp": ts, "sign": dingtalk.sign(ts, app_secret)}}
    taken = client.post("/webhooks/dingtalk", **ding)
    assert taken.status_code == 200 and taken.json()["text"]["content"] == "ok", taken.text
    assert client.post("/webhooks/dingtalk", **ding).status_code == 401
    echo = ref_encrypt(aes, "echo-ok", corp)
    check = {"msg_signature": ref_sign(token, str(int(now)), "123456", echo), "timestamp": str(int(now)),
             "nonce": "123456", "echostr": echo}
    verified = client.get("/webhooks/wecom", params=check)
    assert verified.status_code == 200 and verified.text == "echo-ok", verified.text
    assert client.get("/webhooks/wecom", params=check).status_code == 401


def test_an_approval_link_is_spent_once_across_replicas(where):  # noqa: F811
    first, second = (UsedNonces(where("chatops-links")) for _ in range(2))
    claim = LinkClaim(a="appr-1", d="approve", e=2_000_000_000, n="nonce-1")
    first.spend(claim, "dingtalk:alice", 1_750_000_000.0)
    assert second.is_used("nonce-1")
    with pytest.raises(LinkRefused, match="already used"):
        second.spend(claim, "dingtalk:bob", 1_750_000_001.0)
    second.spend(claim.model_copy(update={"n": "nonce-2"}), "dingtalk:bob", 1_750_000_002.0)
    assert first.is_used("nonce-2")


def _alert(fingerprint: str, status: str = "firing") -> Alert:
    return Alert(status=status, labels={"alertname": "GpuXidError", "node": "gpu-node-3", "severity": "critical",
                                        "layer": "node"},
                 annotations={"runbook": "gpu-xid-errors", "summary": "XID 79"}, startsAt=T0,
                 endsAt=T0 + timedelta(minutes=5) if status == "resolved" else None, fingerprint=fingerprint)


def test_one_incident_and_one_message_when_two_replicas_take_the_same_alert(where):  # noqa: F811
    stores = [IncidentStore(where("alerts")) for _ in range(2)]
    opened: list[int] = []
    barrier = threading.Barrier(2)

    def take(store: IncidentStore, fingerprint: str) -> None:
        barrier.wait()
        opened.append(store.add("GpuXidError/node/gpu-node-3", _alert(fingerprint)).id)

    threads = [threading.Thread(target=take, args=(s, f"fp-{i}")) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(opened)) == 1, opened  # one open incident for the key, whichever replica opened it
    incident = stores[1].open_incident("GpuXidError/node/gpu-node-3")
    assert incident is not None and incident.id == opened[0]
    assert {a.fingerprint for a in stores[0].alerts(incident.id)} == {"fp-0", "fp-1"}
    now = T0 + timedelta(minutes=10)
    claims = [s.claim_message(incident.id, now, now - timedelta(hours=4)) for s in stores]
    assert sorted(claims) == [False, True]  # one message, from one replica
    assert stores[1].close(incident.id, now, "resolved") and not stores[0].close(incident.id, now, "resolved")
    reopened = stores[0].add("GpuXidError/node/gpu-node-3", _alert("fp-2"))
    assert reopened.id != incident.id  # after it closed, the same alert opens a new incident
