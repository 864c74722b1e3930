"""Issue 13, finding 7: degraded, not dead. A read-only data dir, read-only store files or a cluster backend that
does not answer keep the server up; /healthz says 503 and why, /metrics has steward_degraded{reason=...}, and
nothing is swept or done that could not be audited."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from agent.records.audit import AuditLog
from agent.records.store import READONLY, open_store, probe_dir
from core.cluster import NotifyResult
from tests.conftest import free_port
from tests.records_world import as_unprivileged
from tests.test_server_api import START, advance, client_for, settings_for, sweep_with_approval
from tools.prometheus import PrometheusMetrics


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data dir that an unprivileged user can reach (pytest's tmp dirs are private to their owner)."""
    root = Path(tempfile.mkdtemp(prefix="steward-degraded-"))
    root.chmod(0o755)
    yield root / "data"
    for path in root.rglob("*"):
        if path.is_dir():
            path.chmod(0o755)
    shutil.rmtree(root)


def populate(data_dir: Path) -> None:
    """A server ran here and wrote its stores (one sweep, one pending approval), then stopped."""
    with client_for(settings_for(data_dir)) as client:
        sweep_with_approval(client)


def read_only(path: Path, *, directory: bool) -> None:
    for file in path.iterdir():
        file.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    path.chmod(0o555 if directory else 0o777)


def serve_and_probe(data_dir: Path) -> dict:
    """Start the server on `data_dir` and ask it what a person or a monitor would."""
    with client_for(settings_for(data_dir)) as client:
        health = client.get("/healthz")
        sweep = client.post("/api/sweeps")
        return {"health": health.status_code, "body": health.json(), "audit": client.get("/api/audit").status_code,
                "entries": len(client.get("/api/audit").json()["entries"]),
                "pending": len(client.get("/api/approvals").json()["pending"]),
                "sweep": sweep.status_code, "sweep_body": sweep.json(), "metrics": client.get("/metrics").text,
                "health_after": client.get("/healthz").status_code}


def test_read_only_data_dir_serves_degraded_instead_of_dying(data_dir):
    populate(data_dir)
    read_only(data_dir, directory=True)
    seen = as_unprivileged(serve_and_probe, data_dir)
    assert seen["health"] == 503 and seen["body"]["status"] == "degraded"
    details = " ".join(r["detail"] for r in seen["body"]["reasons"] if r["reason"] == READONLY)
    assert "audit.sqlite" in details and "approvals.sqlite" in details and "Permission denied" in details
    # What was recorded stays readable; nothing new is done, since nothing could be audited.
    assert seen["audit"] == 200 and seen["entries"] > 0 and seen["pending"] == 1
    assert seen["sweep"] == 503 and seen["sweep_body"]["reason"] == READONLY
    assert 'steward_degraded{reason="data_dir_readonly"} 1.0' in seen["metrics"]
    assert 'steward_degraded{reason="db_locked"} 0.0' in seen["metrics"]
    assert seen["health_after"] == 503


def test_read_only_store_files_are_reported_not_silently_failing_sweeps(data_dir):
    populate(data_dir)
    read_only(data_dir, directory=False)  # the directory is writable, the stores' files are not
    seen = as_unprivileged(serve_and_probe, data_dir)
    assert seen["health"] == 503
    details = " ".join(r["detail"] for r in seen["body"]["reasons"] if r["reason"] == READONLY)
    assert "audit.sqlite" in details and "approvals.sqlite" in details
    assert seen["sweep"] == 503 and seen["entries"] > 0


def test_a_store_opened_on_an_unwritable_dir_reads_its_history_and_refuses_writes(data_dir):
    populate(data_dir)
    count = AuditLog(data_dir / "audit.sqlite").count()
    read_only(data_dir, directory=True)

    def open_and_write(path: Path) -> tuple:
        log = AuditLog(path / "audit.sqlite")
        try:
            from datetime import UTC, datetime
            log.record("report", at=datetime.now(UTC), run_id="x")
        except Exception as exc:  # noqa: BLE001 - the test looks at which
            refused = type(exc).__name__
        else:
            refused = None
        _, problem = open_store(str(path / "new.sqlite"), "CREATE TABLE t (x)", "t", wal=True)
        return log.count(), refused, [p.reason for p in log.problems()], problem.reason if problem else None, \
            probe_dir(path)

    seen = as_unprivileged(open_and_write, data_dir)
    assert seen[0] == count and seen[1] == "StoreUnavailable" and seen[2] == [READONLY]
    assert seen[3] == READONLY and seen[4] is not None and seen[4].reason == READONLY
    assert not (data_dir / "new.sqlite").exists()


def test_a_backend_that_does_not_answer_is_reported(tmp_path):
    with client_for(settings_for(tmp_path)) as client:
        assert client.get("/healthz").status_code == 200
        rt = client.app.state.runtime
        rt.deps.metrics = PrometheusMetrics(f"http://127.0.0.1:{free_port()}")  # nothing listens there
        assert client.post("/api/sweeps").status_code == 200  # the sweep runs, judges nothing, says why
        health = client.get("/healthz")
        assert health.status_code == 503
        [reason] = health.json()["reasons"]
        assert reason["reason"] == "backend_unavailable" and "metrics unavailable" in reason["detail"]
        assert 'steward_degraded{reason="backend_unavailable"} 1.0' in client.get("/metrics").text
        assert os.getpid()  # and this process is still here to say so


class RevokedWebhook:
    """A notifier whose every send fails (a revoked robot webhook answers 404)."""

    def __init__(self) -> None:
        self.tried = 0

    def notify(self, recipient, subject, body, **_) -> NotifyResult:
        self.tried += 1
        return NotifyResult(recipient=recipient, status="error", channel="dingtalk",
                            detail="Client error '404 Not Found' for url 'https://oapi.example/robot/send?access_token=s3cret'")


def test_healthz_says_so_when_no_owner_warning_of_the_latest_sweep_was_delivered(tmp_path):
    """Every warning failed (a revoked webhook): no notice ever starts, so nothing is ever stopped, yet /healthz said
    200 "ok". Degraded like any backend outage, naming no recipient and no webhook (this answer is public)."""
    notifier = RevokedWebhook()
    with client_for(settings_for(tmp_path), notifier=notifier) as client:
        assert client.post("/api/sweeps").status_code == 200
        assert notifier.tried, "precondition: the sweep tried to warn someone"
        health = client.get("/healthz")
        assert health.status_code == 503 and health.json()["status"] == "degraded", health.json()
        [reason] = health.json()["reasons"]
        assert reason["reason"] == "notify_failing" and f"none of its {notifier.tried} owner warning" in \
            reason["detail"], reason
        assert "s3cret" not in health.text
        assert 'steward_degraded{reason="notify_failing"} 1.0' in client.get("/metrics").text


def test_one_delivered_warning_is_not_notify_failing():
    from agent.api.health import latest_sweep_problems

    sent = {"action": "notify", "status": "executed"}
    failed = {"action": "notify", "status": "failed", "detail": "dingtalk to bob: error"}
    deferred = {"action": "notify", "status": "skipped", "detail": "deferred: outside working hours"}
    assert latest_sweep_problems({"outcomes": [sent, failed]}) == []
    assert latest_sweep_problems({"outcomes": [deferred]}) == []  # nothing was attempted
    assert [p.reason for p in latest_sweep_problems({"outcomes": [failed, deferred]})] == ["notify_failing"]


def test_healthz_says_when_the_planner_model_is_unreachable(tmp_path):
    """The report said "model unavailable; planned by the policy model" while /healthz answered 200 "ok"."""
    settings = settings_for(tmp_path, llm_model="m", llm_base_url=f"http://127.0.0.1:{free_port()}/v1",
                            llm_api_key=SecretStr("sk-test-abcdefghijklmnopqrstuvwxyz"), llm_timeout_s=2)
    with client_for(settings) as client:
        sweep = client.post("/api/sweeps")
        assert sweep.status_code == 200 and "model unavailable" in sweep.json()["report"]
        health = client.get("/healthz")
        assert health.status_code == 503, health.json()
        [reason] = health.json()["reasons"]
        assert reason["reason"] == "planner_degraded" and "did not answer" in reason["detail"], reason
        # A monitor that probes with HEAD (it answered 405) gets the same status, without the body.
        head = client.head("/healthz")
        assert head.status_code == 503 and head.content == b""
        assert client.head("/").status_code == 200
        assert "127.0.0.1" not in reason["detail"]  # the model's error (its URL) stays in the report, not public
        assert "policy model" in reason["detail"]


@pytest.mark.parametrize("store", ["chatops-callbacks.sqlite", "chatops-links.sqlite"])
def test_healthz_names_a_chatops_store_that_refuses_every_callback_or_link(tmp_path, store):
    """A ChatOps replay or link store that refuses every write (503 on every DingTalk/WeCom callback or approve
    link) left /healthz and steward_degraded reporting "ok": nobody was paged while every `keep` reply and card
    button failed. Each store the routes write is now reported, by name."""
    import time

    from agent.chatops import dingtalk
    from server import chatops_wiring, create_app

    (tmp_path / store).write_bytes(b"not a database, a disk error wrote this page\n" * 200)
    app_secret = secrets.token_urlsafe(24)
    settings = settings_for(tmp_path, dingtalk_app_secret=SecretStr(app_secret),
                            chatops_link_secret=SecretStr(secrets.token_urlsafe(24)),
                            chatops_public_url="http://localhost", chatops_approvers=["lead"])
    routers, _ = chatops_wiring(settings)
    app = create_app(settings, speed=0, start_s=START, run_scheduler=False, extra_routers=routers)
    with TestClient(app, base_url="http://localhost") as client:
        if store == "chatops-callbacks.sqlite":
            ts = str(int(time.time() * 1000))
            refused = client.post("/webhooks/dingtalk", json={"msgtype": "text", "text": {"content": "hello"},
                                                              "senderStaffId": "staff-1"},
                                  headers={"timestamp": ts, "sign": dingtalk.sign(ts, app_secret)})
        else:
            advance(client, 300)
            approval_id = client.post("/api/sweeps").json()["approvals_opened"][0]
            token = routers[0].links.token(approval_id, "deny", time.time())
            refused = client.post("/chatops/approve", data={"token": token, "by": "lead"})
        assert refused.status_code == 503, refused.text  # every callback / link is refused ...

        health = client.get("/healthz")
        body = health.json()
        # ... so the probe that pages someone must say so, naming the store
        assert health.status_code == 503 and body["status"] == "degraded", (
            f"{store} refuses every write (503 above) but /healthz says {health.status_code} {body['status']}, "
            f"reasons {body['reasons']}")
        assert any(store.split(".")[0] in r["detail"] for r in body["reasons"]), body["reasons"]
        assert 'steward_degraded{reason="db_error"} 1.0' in client.get("/metrics").text
        assert any(store.split(".")[0] in d["detail"] for d in client.get("/api/status").json()["degraded"])


def test_healthz_names_a_chatops_store_of_a_router_embedded_as_the_docs_show(tmp_path):
    """docs/chatops.md embeds the router with `chatops_router(settings)` and `create_app(extra_routers=[router])`:
    only server.chatops_wiring named its stores to /healthz, so a callback store refusing every callback (503) left
    the probe saying "ok". The router names them itself."""
    import time

    from agent.chatops import dingtalk
    from agent.chatops.router import chatops_router
    from server import create_app

    (tmp_path / "chatops-callbacks.sqlite").write_bytes(b"not a database, a disk error wrote this page\n" * 200)
    app_secret = secrets.token_urlsafe(24)
    settings = settings_for(tmp_path, dingtalk_app_secret=SecretStr(app_secret))
    router = chatops_router(settings)
    app = create_app(settings, speed=0, start_s=START, run_scheduler=False, extra_routers=[router])
    with TestClient(app, base_url="http://localhost") as client:
        ts = str(int(time.time() * 1000))
        refused = client.post("/webhooks/dingtalk", json={"msgtype": "text", "text": {"content": "hello"},
                                                          "senderStaffId": "staff-1"},
                              headers={"timestamp": ts, "sign": dingtalk.sign(ts, app_secret)})
        assert refused.status_code == 503, refused.text
        health = client.get("/healthz")
        assert health.status_code == 503, health.json()
        assert any("chatops-callbacks" in r["detail"] for r in health.json()["reasons"]), health.json()


def test_healthz_names_the_alerts_and_changes_stores_when_they_cannot_be_written(tmp_path):
    """The alert receiver's incident store and the change store are reported the same way, once open."""
    from agent.records.store import Problem

    with client_for(settings_for(tmp_path, alert_webhook_token=SecretStr("alert-token-0123456789"))) as client:
        assert client.get("/healthz").status_code == 200
        alert = {"status": "resolved", "labels": {"alertname": "GpuXid", "node": "gpu-a100-01"},
                 "startsAt": "2026-01-05T10:00:00Z", "endsAt": "2026-01-05T10:01:00Z", "fingerprint": "f1"}
        sent = client.post("/api/alerts", json={"version": "4", "groupKey": "g", "status": "resolved",
                                                "receiver": "steward", "alerts": [alert]},
                           headers={"Authorization": "Bearer alert-token-0123456789"})
        assert sent.status_code == 200, sent.text  # opens the incident store
        rt = client.app.state.runtime
        incidents = rt.stores["alerts"]()
        assert incidents is not None and client.get("/healthz").status_code == 200
        incidents.problem = Problem("db_locked", "held by another writer")
        reasons = client.get("/healthz").json()["reasons"]
        assert [(r["reason"], r["detail"]) for r in reasons] == [("db_locked", "alerts store: held by another writer")]
        incidents.problem = None
        changes = getattr(rt.deps, "changes", None)
        if changes is not None:
            changes.write_problem = Problem("data_dir_full", f"{changes.path}: no space left")
            reasons = client.get("/healthz").json()["reasons"]
            assert [r["reason"] for r in reasons] == ["data_dir_full"] and "changes" in reasons[0]["detail"]


def test_a_chatops_or_alert_store_whose_writes_fail_is_degraded_until_one_works(tmp_path):
    """A ChatOps callback store held locked by another process refused every DingTalk and WeCom callback (503,
    "database is locked") while /healthz said "ok": only a failed open was reported. A failed use is reported too,
    by name, until a use works again; the links and the alert receiver's stores the same way."""
    import sqlite3

    from agent.alerts.store import IncidentStore
    from agent.api.health import store_problems
    from agent.chatops.links import UsedNonces
    from agent.chatops.replay import SeenCallbacks
    from agent.records.store import StoreUnavailable

    class Locked:
        def __init__(self, conn):
            self.conn, self.locked = conn, True

        def execute(self, *args):
            if self.locked:
                raise sqlite3.OperationalError("database is locked")
            return self.conn.execute(*args)

    seen = SeenCallbacks(tmp_path / "chatops-callbacks.sqlite", keep_s=7200)
    seen._conn = lock = Locked(seen._conn)
    with pytest.raises(StoreUnavailable):
        seen.first_use("dingtalk:1:sig", 1000.0)
    [problem] = store_problems("chatops-callbacks", seen)
    assert problem.reason == "db_locked" and "chatops-callbacks" in problem.detail, problem
    lock.locked = False
    assert seen.first_use("dingtalk:1:sig", 1000.0) and store_problems("chatops-callbacks", seen) == []

    from agent.chatops.links import LinkClaim
    nonces = UsedNonces(tmp_path / "chatops-links.sqlite")
    nonces._conn = Locked(nonces._conn)
    with pytest.raises(StoreUnavailable):
        nonces.spend(LinkClaim(a="apr_1", d="approve", n="n1", e=2000, r=""), "lead", 1000.0)
    assert [p.reason for p in store_problems("chatops-links", nonces)] == ["db_locked"]

    incidents = IncidentStore(tmp_path / "alerts.sqlite")
    incidents._conn = lock = Locked(incidents._conn)
    with pytest.raises(StoreUnavailable):
        incidents.open_incident("k")
    assert [p.reason for p in store_problems("alerts", incidents)] == ["db_locked"]
    lock.locked = False
    # A read that works says nothing of writes (another process's lock blocks only those): still degraded ...
    assert incidents.open_incident("k") is None and store_problems("alerts", incidents)
    incidents._run("UPDATE incidents SET key = key WHERE 0")
    assert store_problems("alerts", incidents) == []  # ... until a write works
