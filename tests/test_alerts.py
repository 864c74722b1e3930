"""POST /api/alerts with real Alertmanager v4 webhook payloads: grouped, deduplicated incidents a person can act on."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from agent.alerts.incidents import Alert, AlertmanagerPayload, first_steps, incident_key
from agent.alerts.intake import AlertIntake
from agent.alerts.store import IncidentStore
from agent.config.settings import Settings
from agent.records.audit import AuditLog
from core.cluster import NotifyResult
from server import create_app
from tests.zh_text import leftovers

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "alertmanager-shared-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START = 3 * 3600 + 50 * 60


@pytest.fixture
def client(tmp_path):
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, alert_webhook_token=TOKEN)
    app = create_app(settings, speed=0, start_s=START, run_scheduler=False)
    with TestClient(app, base_url="http://localhost") as c:
        assert c.post("/api/sweeps").status_code == 200  # the steward's latest observation
        yield c


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def alert(status: str, node: str, gpu: str, starts: datetime, ends: datetime | None, name: str = "GpuXidError") -> dict:
    labels = {"alertname": name, "severity": "critical", "layer": "node", "node": node, "Hostname": node,
              "gpu": gpu, "instance": "dcgm:9400"}
    return {"status": status, "labels": labels,
            "annotations": {"runbook": "gpu-xid-errors", "summary": f"XID 79 on {node} GPU {gpu}",
                            "description": f"dcgm-exporter reports XID 79 on GPU {gpu}."},
            "startsAt": iso(starts), "endsAt": iso(ends) if ends else "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS",
            "fingerprint": f"{abs(hash((name, node, gpu))):016x}"}


def payload(*alerts: dict) -> dict:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    return {"version": "4", "groupKey": '{}:{alertname="GpuXidError"}', "truncatedAlerts": 0, "status": status,
            "receiver": "gpu-steward", "groupLabels": {"alertname": "GpuXidError"},
            "commonLabels": {"alertname": "GpuXidError"}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts)}


def busy_node(client: TestClient) -> tuple[str, list[str]]:
    obs = client.app.state.runtime.newest_observation()
    by_node: dict[str, list[str]] = {}
    for j in obs.jobs:
        if j.node and j.state == "running":
            by_node.setdefault(j.node, []).append(j.id)
    node = max(by_node, key=lambda n: len(by_node[n]))
    return node, by_node[node]


def test_xid_storm_is_one_grouped_deduped_incident_naming_the_jobs(client):
    rt = client.app.state.runtime
    now, inbox = rt.deps.clock.now(), rt.deps.notifier.sent
    before = len(inbox)
    node, jobs = busy_node(client)
    first = alert("firing", node, "3", now - timedelta(minutes=12), None)
    second = alert("firing", node, "5", now - timedelta(minutes=8), None)
    for body in (payload(first), payload(first, second), payload(first, second)):  # Alertmanager repeats
        resp = client.post("/api/alerts", json=body, headers=AUTH)
        assert resp.status_code == 200, resp.text
    incidents = resp.json()["incidents"]
    assert len(incidents) == 1 and incidents[0]["alerts"] == 2 and incidents[0]["outcome"] == "already_told"
    messages = inbox[before:]
    assert len(messages) == 1
    text = messages[0].body
    assert f"node/{node}" in messages[0].subject and "CRITICAL" in messages[0].subject
    assert all(job in text for job in jobs)
    assert "[rb:gpu-xid-errors]" in text and "Notify the owners of jobs on the node" in text
    assert "1 alert(s)" in text  # told when the first sustained alert came; the second joined the same incident
    resolved = client.post("/api/alerts", headers=AUTH, json=payload(
        alert("resolved", node, "3", now - timedelta(minutes=12), now), alert("resolved", node, "5", now - timedelta(minutes=8), now)))
    assert resolved.json()["incidents"][0]["outcome"] == "resolved"
    assert len(inbox) == before + 1
    entries = rt.deps.audit.entries(kind="alert_incident", limit=10)
    assert sorted(e.status for e in entries) == ["executed", "resolved"]
    assert {e.target for e in entries} == {f"node/{node}"}


def test_incidents_survive_a_restart_and_are_not_told_twice(tmp_path):
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, alert_webhook_token=TOKEN)
    sent = []
    for _ in range(2):
        with TestClient(create_app(settings, speed=0, start_s=START, run_scheduler=False),
                        base_url="http://localhost") as c:
            rt = c.app.state.runtime
            now = rt.deps.clock.now()
            c.post("/api/alerts", headers=AUTH, json=payload(alert("firing", "gpu-a", "0", now - timedelta(hours=1), None)))
            sent.extend(rt.deps.notifier.sent)
    assert len([m for m in sent if "GpuXidError" in m.subject]) == 1


def test_a_transient_blip_produces_no_message(client):
    rt = client.app.state.runtime
    now, inbox = rt.deps.clock.now(), rt.deps.notifier.sent
    before = len(inbox)
    node, _ = busy_node(client)
    blip = alert("firing", node, "1", now - timedelta(minutes=1), None, name="GpuHighTemperature")
    resp = client.post("/api/alerts", headers=AUTH, json=payload(blip))
    assert resp.json()["incidents"][0]["outcome"] == "waiting"
    gone = alert("resolved", node, "1", now - timedelta(minutes=1), now + timedelta(minutes=1), name="GpuHighTemperature")
    resp = client.post("/api/alerts", headers=AUTH, json=payload(gone))
    assert resp.json()["incidents"][0]["outcome"] == "transient"
    assert len(inbox) == before
    [entry] = rt.deps.audit.entries(kind="alert_incident", limit=10)
    assert entry.status == "skipped" and "transient" in (entry.reason or "")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}])
def test_unauthenticated_is_401_without_parsing(client, headers):
    resp = client.post("/api/alerts", content=b"{not json at all", headers={**headers, "Content-Type": "application/json"})
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"


def test_not_configured_is_404(tmp_path):
    settings = Settings(data_dir=tmp_path, leader_lock="none")
    with TestClient(create_app(settings, speed=0, run_scheduler=False), base_url="http://localhost") as c:
        assert c.post("/api/alerts", json={}, headers=AUTH).status_code == 404


def test_malformed_payload_is_422_naming_the_field(client):
    now = client.app.state.runtime.deps.clock.now()
    bad = payload(alert("firing", "n1", "0", now, None))
    bad["alerts"][0]["startsAt"] = "yesterday"
    resp = client.post("/api/alerts", headers=AUTH, json=bad)
    assert resp.status_code == 422 and "alerts.0.startsAt" in resp.json()["detail"]
    resp = client.post("/api/alerts", headers=AUTH, json={**payload(alert("firing", "n1", "0", now, None)), "version": "3"})
    assert resp.status_code == 422 and "'version'" in resp.json()["detail"]
    resp = client.post("/api/alerts", headers=AUTH, content=b"[1, 2")
    assert resp.status_code == 422


def test_grouping_key_and_runbook_steps():
    assert incident_key({"alertname": "GpuXidError", "Hostname": "n1", "gpu": "3"}) == \
        incident_key({"alertname": "GpuXidError", "node": "n1", "gpu": "5"})
    assert incident_key({"alertname": "GpuXidError", "node": "n1"}) != incident_key({"alertname": "GpuXidError", "node": "n2"})
    assert incident_key({"alertname": "X", "pool": "a100"}) == '["X", "pool/a100"]'
    assert "\x00" not in incident_key({"alertname": "X", "node": "n1"})  # Postgres text cannot hold NUL
    assert first_steps("1. one\n   more\n2. two\n3. three") == ["one more", "two"]


def test_rules_load_in_promtool_and_the_xid_unit_test_fires():
    promtool = subprocess.run(["which", "promtool"], capture_output=True, text=True).stdout.strip()
    if not promtool:
        import os

        if os.environ.get("CI"):
            pytest.fail("promtool is missing under CI")
        pytest.skip("promtool not installed")
    rules = ROOT / "deploy/prometheus/steward-rules.yaml"
    for args in (["check", "rules", str(rules)], ["test", "rules", str(rules.with_suffix(".test.yaml"))]):
        done = subprocess.run([promtool, *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_rule_names_an_existing_runbook_and_its_layer():
    import yaml

    from agent.retrieval.runbooks import load_runbooks

    ids = {b.id for b in load_runbooks()}
    rules = [r for g in yaml.safe_load((ROOT / "deploy/prometheus/steward-rules.yaml").read_text())["groups"]
             for r in g["rules"]]
    assert {r["labels"]["layer"] for r in rules} == {"node", "scheduling", "service", "governance"}
    for r in rules:
        assert r["annotations"]["runbook"] in ids, r["alert"]
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
    assert json.dumps(rules)  # plain data


def test_no_byte_of_an_unauthenticated_alert_body_is_read(tmp_path):
    from tests.test_api_guard import asgi_request

    settings = Settings(data_dir=tmp_path, leader_lock="none", alert_webhook_token=TOKEN)
    app = create_app(settings, speed=0, run_scheduler=False)
    for headers in ((), (("authorization", "Bearer wrong"),)):
        status, _, pulled = asgi_request(app, "POST", "/api/alerts", headers=(("content-type", "application/json"),
                                                                              *headers), blocks=32)
        assert (status, pulled) == (401, 0)


# -- issue r13: Postgres keys, time zones, a failed message, one bad alert among good ones ------------------------


def test_a_plain_alertmanager_webhook_is_taken_on_postgres(tmp_path, postgres_url):
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, alert_webhook_token=TOKEN,
                        database_url=SecretStr(postgres_url))
    with TestClient(create_app(settings, speed=0, start_s=START, run_scheduler=False), base_url="http://localhost",
                    raise_server_exceptions=False) as c:
        assert c.post("/api/sweeps").status_code == 200
        rt = c.app.state.runtime
        now = rt.deps.clock.now()
        resp = c.post("/api/alerts", headers=AUTH, json=payload(alert("firing", "gpu-a", "0", now - timedelta(hours=1),
                                                                      None)))
        assert resp.status_code == 200, resp.text
        assert resp.json()["incidents"][0]["outcome"] == "message_sent"
        again = c.post("/api/alerts", headers=AUTH, json=payload(alert("firing", "gpu-a", "1", now - timedelta(hours=1),
                                                                       None)))
        assert [i["outcome"] for i in again.json()["incidents"]] == ["already_told"]  # the same incident, by key


def test_an_incident_opened_under_the_old_nul_key_in_sqlite_is_still_found(tmp_path):
    store = IncidentStore(tmp_path / "alerts.sqlite")
    t0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    labels = {"alertname": "GpuXidError", "node": "gpu-a"}
    store._conn.execute(  # a row as an earlier version wrote it: NUL-separated key
        "INSERT INTO incidents (key, alertname, subject, severity, layer, summary, opened_at, notified_at, messages) "
        "VALUES (?, 'GpuXidError', 'node/gpu-a', 'critical', 'node', 'XID', ?, ?, 1)",
        ("GpuXidError\x00node/gpu-a", t0.isoformat(), t0.isoformat()))
    [old] = store.open_incidents()
    new = store.add(incident_key(labels), Alert(status="firing", labels=labels, startsAt=t0, fingerprint="f1"))
    assert new.id == old.id and len(store.open_incidents()) == 1  # no second incident, no second message


def test_a_time_without_a_zone_is_a_422_naming_the_field_and_the_alert(client):
    now = client.app.state.runtime.deps.clock.now()
    naive = alert("firing", "gpu-naive", "0", now - timedelta(hours=1), None)
    naive["startsAt"] = (now - timedelta(hours=1)).replace(tzinfo=None).isoformat()
    resp = client.post("/api/alerts", headers=AUTH, json=payload(naive))
    assert resp.status_code == 422, resp.text
    detail = resp.json()["detail"]
    assert "alerts.0.startsAt" in detail and "time zone" in detail and naive["fingerprint"] in detail
    assert "GpuXidError" in detail
    for bad in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00+08:00"):
        far = alert("resolved", "gpu-far", "0", now, now)
        far["startsAt"] = bad
        resp = client.post("/api/alerts", headers=AUTH, json=payload(far))
        assert resp.status_code == 422 and "out of range" in resp.json()["detail"], (bad, resp.text)
    # Alertmanager's zero endsAt of a firing alert is "not ended", not out of range.
    assert client.post("/api/alerts", headers=AUTH, json=payload(
        alert("firing", "gpu-zero", "0", now, None))).status_code == 200


def test_a_naive_alert_next_to_good_ones_is_refused_and_later_webhooks_still_work(tmp_path):
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, alert_webhook_token=TOKEN)
    with TestClient(create_app(settings, speed=0, start_s=START, run_scheduler=False), base_url="http://localhost",
                    raise_server_exceptions=False) as c:
        assert c.post("/api/sweeps").status_code == 200
        now = c.app.state.runtime.deps.clock.now()
        good = alert("firing", "gpu-mix", "0", now - timedelta(hours=1), None)
        naive = alert("firing", "gpu-mix", "1", now - timedelta(hours=1), None)
        naive["startsAt"] = (now - timedelta(hours=1)).replace(tzinfo=None).isoformat()
        first = c.post("/api/alerts", headers=AUTH, json=payload(good, naive))
        assert first.status_code == 200, first.text
        assert [r["field"] for r in first.json()["rejected"]] == ["alerts.1.startsAt"]
        later = c.post("/api/alerts", headers=AUTH, json=payload(alert("firing", "gpu-fine", "0",
                                                                       now - timedelta(hours=1), None)))
        assert later.status_code == 200, later.text


def test_bad_times_stored_by_an_earlier_version_block_no_other_incident(tmp_path):
    """A naive time (read as UTC) and an overflowing one, stored before times were checked: the naive one settles,
    the overflowing one is logged and audited as failed, and every other incident is settled and told."""
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, alert_webhook_token=TOKEN)
    old = IncidentStore(settings.store("alerts"))
    for n, (node, starts) in enumerate((("gpu-naive", "2020-01-01T00:00:00"), ("gpu-y9", "9999-12-31T23:59:59+00:00"))):
        old._conn.execute("INSERT INTO incidents (key, alertname, subject, severity, layer, summary, opened_at) "
                          "VALUES (?, 'GpuXidError', ?, 'critical', 'node', 'XID', ?)",
                          (f"GpuXidError\x00node/{node}", f"node/{node}", starts))
        old._conn.execute("INSERT INTO incident_alerts VALUES (?, ?, 'firing', ?, NULL, ?, '{}')",
                          (f"old-{n}", n + 1, starts, json.dumps({"alertname": "GpuXidError", "node": node})))
    old._conn.close()
    with TestClient(create_app(settings, speed=0, start_s=START, run_scheduler=False), base_url="http://localhost",
                    raise_server_exceptions=False) as c:
        assert c.post("/api/sweeps").status_code == 200
        rt = c.app.state.runtime
        now = rt.deps.clock.now()
        resp = c.post("/api/alerts", headers=AUTH, json=payload(alert("firing", "gpu-fine", "0",
                                                                      now - timedelta(hours=1), None)))
        assert resp.status_code == 200, resp.text
        outcomes = {i["subject"]: i["outcome"] for i in resp.json()["incidents"]}
        assert outcomes == {"node/gpu-naive": "message_sent", "node/gpu-y9": "error", "node/gpu-fine": "message_sent"}
        failed = [e for e in rt.deps.audit.entries(kind="alert_incident", limit=20) if e.status == "failed"]
        assert [e.target for e in failed] == ["node/gpu-y9"] and "OverflowError" in (failed[0].reason or "")
        resolved = c.post("/api/alerts", headers=AUTH, json=payload(alert(
            "resolved", "gpu-fine", "0", now - timedelta(hours=1), now)))
        assert {i["subject"]: i["outcome"] for i in resolved.json()["incidents"]}["node/gpu-fine"] == "resolved"


class _Raises:
    """A notifier whose first call raises, as a proxy's HTML answer makes response.json() raise."""

    def __init__(self) -> None:
        self.calls = 0

    def notify(self, recipient, subject, body, **kw):
        self.calls += 1
        if self.calls == 1:
            raise ValueError("Expecting value: line 1 column 1 (char 0)")
        return NotifyResult(recipient=recipient, status="sent", channel="chatops", detail="")


def _one(now: datetime, starts: str | None = None) -> AlertmanagerPayload:
    return AlertmanagerPayload.model_validate({
        "version": "4", "groupKey": "g", "status": "firing", "receiver": "r",
        "alerts": [{"status": "firing", "labels": {"alertname": "GpuXidError", "node": "gpu-a"},
                    "startsAt": starts or (now - timedelta(hours=1)).isoformat(), "fingerprint": "f1"}]})


def test_a_notifier_that_raises_gives_the_slot_back_and_is_audited():
    notifier, audit, store = _Raises(), AuditLog(":memory:"), IncidentStore()
    intake = AlertIntake(store, notifier=lambda: notifier, audit=lambda: audit, observation=lambda: None,
                         runbooks=[])
    now = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    [first] = intake.receive(_one(now), now)
    assert first["outcome"] == "message_error" and "ValueError" in str(first["error"])
    assert store.get(first["incident"]).notified_at is None  # not taken as told
    [entry] = audit.entries(kind="alert_incident", limit=10)
    assert entry.status == "failed" and "ValueError" in (entry.reason or "")
    [second] = intake.receive(_one(now), now + timedelta(minutes=1))
    assert second["outcome"] == "message_sent" and notifier.calls == 2
    assert store.get(second["incident"]).messages == 1


class _Inbox:
    def __init__(self) -> None:
        self.bodies: list[str] = []

    def notify(self, recipient, subject, body, **kw):
        self.bodies.append(body)
        return NotifyResult(recipient=recipient, status="sent", channel="chatops", detail="")


@pytest.mark.parametrize("language, shown", [("en", "firing since 2026-11-02 11:00 UTC"),
                                             ("zh", "自 2026-11-02 11:00 UTC 起持续")])
def test_an_alert_stamped_in_beijing_time_is_shown_in_utc(language, shown):
    inbox = _Inbox()
    intake = AlertIntake(IncidentStore(), notifier=lambda: inbox, audit=lambda: AuditLog(":memory:"),
                         observation=lambda: None, runbooks=[], language=language)
    now = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    intake.receive(_one(now, "2026-11-02T19:00:00+08:00"), now)  # 11:00 UTC
    [body] = inbox.bodies
    assert shown in body, body


def test_one_malformed_alert_does_not_lose_the_good_ones(client):
    rt = client.app.state.runtime
    now = rt.deps.clock.now()
    good = alert("firing", "gpu-good", "0", now - timedelta(hours=1), None)
    bad = alert("firing", "gpu-bad", "0", now - timedelta(hours=1), None)
    bad["labels"]["gpu"] = 3  # a number where Alertmanager sends a string (a broken relabel)
    resp = client.post("/api/alerts", headers=AUTH, json=payload(good, bad, "not an alert"))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert (body["received"], body["taken"]) == (3, 1)
    assert [i["subject"] for i in body["incidents"]] == ["node/gpu-good"]
    assert [(r["index"], r["field"]) for r in body["rejected"]] == [(1, "alerts.1.labels.gpu"), (2, "alerts.2")]
    assert body["rejected"][0]["fingerprint"] == bad["fingerprint"] and body["rejected"][0]["reason"]
    [entry] = rt.deps.audit.entries(kind="alert_rejected", limit=10)
    assert "2 of 3" in (entry.reason or "") and "alerts.1.labels.gpu" in (entry.reason or "")
    nul = alert("firing", "gpu-nul", "0", now - timedelta(hours=1), None)
    nul["annotations"]["summary"] = "bad\x00byte"  # Postgres text cannot hold it: refused on either store
    resp = client.post("/api/alerts", headers=AUTH, json=payload(bad, nul))
    assert resp.status_code == 422, resp.text  # none taken
    detail = resp.json()["detail"]
    assert "alerts.0.labels.gpu" in detail and "alerts.1.annotations.summary" in detail
    assert leftovers(detail.split(" / ", 1)[1]) == []
    assert len(rt.deps.audit.entries(kind="alert_rejected", limit=10)) == 2
