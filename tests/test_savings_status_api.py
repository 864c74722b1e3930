"""Issue 14 through the HTTP API on the demo cluster: savings that never decrease (a stop counts once its job is
gone, a SIGTERM the job ignored counts nothing), waste by team apart from pools, per-finding status, approval
context and outcomes, exemptions listed and revoked, and the live sweep status (GET /api/status, /api/events)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from agent.api.build import fast_forward
from agent.config.settings import Settings
from server import create_app
from tests.conftest import free_port

FORCE_ASKED = 2 * 3600 + 55 * 60  # 16:55 on the demo: augment-worker ignored SIGTERM; a forced stop waits for a human


def client_at(data_dir: Path, start_s: float = 0) -> TestClient:
    settings = Settings(data_dir=data_dir, leader_lock="none", sweep_every_s=300)
    app = create_app(settings, speed=0, start_s=start_s, run_scheduler=False)
    return TestClient(app, base_url="http://localhost")


def reclaimed_metric(client: TestClient) -> float:
    found = re.search(r"^steward_reclaimed_gpu_hours_total (\S+)$", client.get("/metrics").text, re.M)
    assert found is not None
    return float(found.group(1))


def sweep_after(client: TestClient, seconds: float) -> None:
    rt = client.app.state.runtime
    with rt.graph_lock:
        rt.sim_clock.cluster.advance(seconds)
    assert client.post("/api/sweeps").status_code == 200


@pytest.fixture
def at_force_request(tmp_path):
    with client_at(tmp_path) as client:
        fast_forward(client.app.state.runtime, until_s=FORCE_ASKED)
        yield client


def test_savings_never_decrease_across_an_approved_force_stop(at_force_request):
    client = at_force_request
    rt = client.app.state.runtime
    stops = rt.deps.audit.entries(kind="execution", status="executed", target="cv-team/augment-worker")
    assert [(e.action, e.data["detail"].split(":")[0]) for e in stops if e.action != "notify"] == [("terminate",
                                                                                                      "stopping")]
    before = client.get("/api/savings").json()
    gone = [e for e in rt.deps.audit.entries(kind="execution", status="executed", limit=1000)
            if e.action == "terminate" and e.data["detail"].startswith("stopped")]
    assert before["actions"] == len(gone) > 0  # the ignored SIGTERM frees nothing
    metric_before = reclaimed_metric(client)
    assert metric_before == pytest.approx(before["reclaimed_gpu_hours"])

    force = next(a for a in client.get("/api/approvals").json()["pending"] if a["action"] == "force_terminate")
    assert (force["owner"], force["gpus"], force["finding_kind"]) == ("erin", 2, "idle")
    assert force["cost_per_hour"] == pytest.approx(8.2) and "util" in force["evidence"]
    assert client.post(f"/api/approvals/{force['id']}", json={"decision": "approve"}).status_code == 200

    after = client.get("/api/savings").json()
    assert after["reclaimed_gpu_hours"] >= before["reclaimed_gpu_hours"]
    assert after["reclaimed_money"] >= before["reclaimed_money"]
    assert after["actions"] == before["actions"] + 1
    assert reclaimed_metric(client) >= metric_before
    answered = next(a for a in client.get("/api/approvals").json()["recent"] if a["id"] == force["id"])
    assert (answered["outcome"], answered["outcome_detail"]) == ("executed", "stopped: killed")

    sweep_after(client, 3600)
    later = client.get("/api/savings").json()
    # An hour on, the forced stop's 2 GPUs have freed 2 GPU-hours on top of what the earlier stops added.
    earlier_gpus = sum(int(e.data["gpus"]) for e in gone)
    assert later["reclaimed_gpu_hours"] == pytest.approx(after["reclaimed_gpu_hours"] + earlier_gpus + 2, abs=0.02)
    points = [p["reclaimed_gpu_hours"] for p in later["timeline"]]
    assert points == sorted(points)


def test_a_job_that_leaves_after_sigterm_counts_from_when_it_is_seen_gone(at_force_request):
    client = at_force_request
    rt = client.app.state.runtime
    before = client.get("/api/savings").json()
    with rt.graph_lock:  # the owner ends the job that ignored the steward's SIGTERM
        assert rt.sim_clock.cluster.stop_job("cv-team/augment-worker", force=True).status == "stopped"
    sweep_after(client, 300)
    confirmed = rt.deps.audit.entries(kind="stop_confirmed", target="cv-team/augment-worker")
    assert [(e.action, e.status, e.data["gpus"]) for e in confirmed] == [("terminate", "gone", 2)]
    sweep_after(client, 300)
    assert len(rt.deps.audit.entries(kind="stop_confirmed")) == 1  # once per job
    after = client.get("/api/savings").json()
    assert after["actions"] == before["actions"] + 1
    assert after["reclaimed_gpu_hours"] >= before["reclaimed_gpu_hours"] + 2 * 300 / 3600


def test_waste_by_team_apart_from_pools_and_finding_status(tmp_path):
    with client_at(tmp_path) as client:
        fast_forward(client.app.state.runtime, until_s=4 * 3600 + 20 * 60)
        savings = client.get("/api/savings").json()
        assert {t["team"] for t in savings["waste_by_team"]} == {"cv-team", "research"}
        assert [(p["pool"], p["target_type"]) for p in savings["waste_by_pool"]] == [("a100-ondemand", "pool")]
        page = client.get("/api/findings").json()
        assert page["sweep_running"] is False
        worker = next(f for f in page["findings"] if f["target"] == "cv-team/augment-worker")
        assert (worker["warned_at"], worker["stop_due_at"]) == ("2026-11-02T15:45:00Z", "2026-11-02T16:45:00Z")
        assert worker["stopping_since"] == "2026-11-02T16:45:00Z" and worker["stopped_at"] is None
        assert worker["approval_id"] is not None
        pool = next(f for f in page["findings"] if f["target"] == "a100-ondemand")
        assert pool["warned_at"] is None and pool["approval_id"] is not None
        # An over-provisioned job told to right-size: advised, not warned of a stop (the page showed it "new").
        advised = [f for f in page["findings"] if f["kind"] == "overprovisioned"]
        assert advised and all(f["advised_at"] and f["warned_at"] is None for f in advised), advised
        assert worker["advised_at"] is None


def test_exemptions_listed_revoked_once_and_no_longer_honoured(tmp_path):
    with client_at(tmp_path, start_s=3 * 3600 + 55 * 60) as client:
        rt = client.app.state.runtime
        assert client.post("/api/sweeps").status_code == 200
        assert client.get("/api/exemptions").json() == {"exemptions": []}
        granted = client.post("/api/exemptions", json={"job": "research/lr-sweep", "duration": "4h", "reason": "demo"})
        assert granted.status_code == 201, granted.text
        listed = client.get("/api/exemptions").json()["exemptions"]
        assert [(e["target"], e["data"]["by"], e["reason"]) for e in listed] == [("research/lr-sweep", "local-dev",
                                                                                  "demo")]
        findings = client.get("/api/findings").json()["findings"]
        assert next(f for f in findings if f["target"] == "research/lr-sweep")["exempt_until"] == granted.json()["until"]
        revoked = client.post("/api/exemptions/revoke", json={"job": "research/lr-sweep", "reason": "done early"})
        assert revoked.status_code == 200 and revoked.json()["by"] == "local-dev"
        again = client.post("/api/exemptions/revoke", json={"job": "research/lr-sweep"})
        assert again.status_code == 404 and "research/lr-sweep" in again.json()["detail"]
        assert client.get("/api/exemptions").json() == {"exemptions": []}
        assert rt.deps.audit.history(rt.deps.clock.now()).exemptions == []
        entries = client.get("/api/audit", params={"kind": "exemption"}).json()["entries"]
        assert [(e["status"], e["data"].get("revokes")) for e in entries] == [("revoked", [listed[0]["seq"]]),
                                                                               ("granted", None)]


def test_status_and_events_stream(tmp_path):
    from agent.api.local_server import serve_in_thread

    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300,
                        api_tokens={"v": {"name": "vic", "role": "viewer"}})
    app = create_app(settings, speed=0, start_s=3 * 3600 + 55 * 60, run_scheduler=False)
    with serve_in_thread(app, free_port()) as base:
        assert httpx.get(f"{base}/api/status").status_code == 401
        status = httpx.get(f"{base}/api/status", headers={"Authorization": "Bearer v"}).json()
        assert (status["running"], status["last_finished_at"], status["sweeps"]) == (False, None, 0)
        assert (status["scenario_ended"], status["role"]) == (False, "viewer")
        assert httpx.get(f"{base}/api/events").status_code == 401
        with httpx.stream("GET", f"{base}/api/events", headers={"Authorization": "Bearer v"}, timeout=30) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            lines = resp.iter_lines()
            assert next(lines) == "event: status"
            first = json.loads(next(lines)[len("data: "):])
            assert first["last_run_id"] is None and first["pending_approvals"] == 0
            app.state.runtime.sweep_now("test")
            for line in lines:  # the change is pushed: the finished sweep
                if line.startswith("data: ") and json.loads(line[6:])["last_run_id"] is not None:
                    break
            pushed = json.loads(line[6:])
            assert pushed["sweeps"] == 1 and pushed["last_finished_at"] == "2026-11-02T17:55:00Z"
