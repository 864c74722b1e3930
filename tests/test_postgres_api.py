"""The HTTP API over Postgres (STEWARD_DATABASE_URL, the production overlay: replicas share audit and approvals).

- /healthz probed `Path(audit.path).parent` for writability; with Postgres that path is the database URL, so it
  probed a directory named like `postgresql:/steward@db:5432` and was 503 for ever: no replica became Ready. It now
  probes the data dir and each SQLite store's directory, never a path made from a URL.
- A NUL character (valid JSON and UTF-8, fine on SQLite) reached Postgres, which refuses it: a 500 for any viewer
  (audit filter) or a 503 "data store cannot be written" that marked the whole steward degraded (db_error). It is
  now a 422 naming the field, and a value Postgres refuses as data is the caller's error, never store health."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi.testclient import TestClient
from pydantic import SecretStr

from agent.records.audit import AuditLog
from agent.records.store import ValueRefused
from server import create_app
from tests.test_server_api import START, settings_for

START_AT = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _client(tmp_path, url: str) -> TestClient:
    app = create_app(settings_for(tmp_path, database_url=SecretStr(url)), speed=0, start_s=START,
                     run_scheduler=False)
    return TestClient(app, base_url="http://localhost", raise_server_exceptions=False)


def test_a_healthy_postgres_backed_steward_is_ready(tmp_path, postgres_url):
    with _client(tmp_path, postgres_url) as client:
        health = client.get("/healthz")
        body = health.json()
        assert (health.status_code, body["status"], body["reasons"]) == (200, "ok", []), (
            f"nothing is wrong (Postgres is up, the data dir is writable), yet /healthz is {health.status_code}: "
            f"{body['reasons']} -- the readinessProbe keeps every replica out of the Service")
        metrics = client.get("/metrics").text
        assert 'steward_degraded{reason="db_error"} 0.0' in metrics


def test_a_nul_character_from_a_client_is_a_422_not_a_500_or_a_degraded_store(tmp_path, postgres_url):
    with _client(tmp_path, postgres_url) as client:
        page = client.get("/api/audit", params={"target": "ml-team/a\x00b"})
        assert page.status_code == 422, f"GET /api/audit with a NUL in a filter: {page.status_code} {page.text[:200]}"
        assert "target" in page.json()["message"] and "NUL" in page.text
        export = client.get("/api/audit/export", params={"target": "ml-team/a\x00b"})
        assert export.status_code == 422, export.text[:200]
        kept = client.post("/api/exemptions", json={"job": "ml-team/jupyter-carol", "duration": "4h",
                                                      "reason": "demo\x00tonight"})
        assert kept.status_code == 422, f"an exemption whose reason holds a NUL: {kept.status_code} {kept.text[:200]}"
        assert "reason" in kept.json()["message"]
        chat = client.post("/api/chat", json={"message": "keep 4h ml-team/jupyter-carol demo\x00tonight"})
        assert chat.status_code == 422 and "message" in chat.json()["message"]
        reasons = client.get("/healthz").json()["reasons"]
        assert not [r for r in reasons if "NUL" in r["detail"]], (
            f"one client's bad input marks the whole steward degraded: {reasons}")


def test_a_value_postgres_refuses_is_the_callers_error_not_the_stores_health(postgres_url):
    """Below the API: a NUL that reaches the store (any path the edge does not check) is ValueRefused, a
    ValueError; the store records no write problem, nothing is written, and the next write goes through."""
    log = AuditLog(postgres_url)
    try:
        log.record("decision", at=START_AT, run_id="r", target="a")
        try:
            log.record("decision", at=START_AT, run_id="r", target="a\x00b")
        except ValueRefused as exc:
            assert "NUL" in str(exc) or "0x00" in str(exc)
        else:
            raise AssertionError("a NUL in text was written to Postgres")
        assert log.problems() == []
        assert log.record("decision", at=START_AT, run_id="r", target="c") == 2
        assert [e.target for e in log.entries()] == ["c", "a"]
        assert log.verify().ok
    finally:
        log.close()
