"""A store /healthz now reports (alerts, opened on the first webhook) that could not be opened ONCE (a moment's lock,
a Postgres blip) stays failed for the life of the process: every later webhook is refused and /healthz answers 503
for ever, though the store is fine again - the readiness probe (deploy/kubernetes/base/deployment.yaml: /healthz)
takes the replica out of the Service and the TCP liveness probe never restarts it. Now a store whose open failed
is opened again when next used or looked at (agent/records/store.py Reopening), at most every REOPEN_S."""
from __future__ import annotations

import sqlite3
from datetime import timedelta

from fastapi.testclient import TestClient

from agent.config.settings import Settings
from server import create_app
from tests.test_alerts import AUTH, START, TOKEN, alert, busy_node, payload


def test_a_moments_lock_on_the_alert_store_does_not_keep_the_steward_unready(tmp_path, monkeypatch):
    import agent.records.store

    monkeypatch.setattr(agent.records.store, "REOPEN_S", 0.0)  # opened again at the next use (10 s in production)
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, alert_webhook_token=TOKEN)
    app = create_app(settings, speed=0, start_s=START, run_scheduler=False)
    with TestClient(app, base_url="http://localhost") as client:
        assert client.post("/api/sweeps").status_code == 200
        assert client.get("/healthz").status_code == 200
        now = app.state.runtime.deps.clock.now()
        node, _ = busy_node(client)
        body = payload(alert("firing", node, "3", now - timedelta(minutes=12), None))

        holder = sqlite3.connect(tmp_path / "alerts.sqlite", isolation_level=None, timeout=0)
        holder.execute("CREATE TABLE IF NOT EXISTS other (x)")
        holder.execute("BEGIN EXCLUSIVE")  # a backup / another process holds the file for a moment
        try:
            first = client.post("/api/alerts", json=body, headers=AUTH)
        finally:
            holder.rollback()
            holder.close()
        assert first.status_code == 503, first.text[:200]

        # The lock is gone: the store can be written again.
        later = client.post("/api/alerts", json=body, headers=AUTH)
        health = client.get("/healthz")
        assert health.status_code == 200 and later.status_code == 200, (
            f"lock released, yet alerts answer {later.status_code} and /healthz {health.status_code} "
            f"{health.json().get('reasons')}")
