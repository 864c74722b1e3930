"""Issue 13, finding 2: an answer is never lost. It is recorded first; auditing it and resuming the waiting
graph follow, and when either fails (the audit DB locked by another writer, the process killed between steps)
the answer is completed later, before the next sweep or at restart, exactly once."""

from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient

from agent.records.approvals import ApprovalError
from tests.records_world import JOB, Steward, answers, forced
from tests.test_server_api import client_for, settings_for, sweep_with_approval


class Killed(BaseException):
    """The process dies here: not an Exception, so nothing on the way out catches it."""


def _kill(*args, **kwargs):
    raise Killed


def _lock(path) -> sqlite3.Connection:
    """Another connection takes the database's write lock and keeps it (until rollback)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_answer_while_the_audit_db_is_locked_is_kept_and_completed_once_after_a_restart(tmp_path):
    first = Steward(tmp_path)
    approval = first.sweep_until_approval()
    first.deps.audit._conn.execute("PRAGMA busy_timeout = 300")  # wait 0.3 s for the lock, not 5 s
    blocker = _lock(tmp_path / "audit.sqlite")

    result = first.service.answer(approval.id, "approve", by="oncall-lead", reason="confirmed idle")

    assert "locked" in result.state["deferred"] and result.state["outcomes"] == []
    assert "do not answer again" in result.report and "无需再次审批" in result.report
    assert first.deps.approvals.get(approval.id).status == "approved"  # recorded: not lost
    assert [a.id for a in first.deps.approvals.incomplete()] == [approval.id]
    assert "db_locked" in [p.reason for p in first.deps.audit.problems()]
    assert forced(first.deps.audit) == [] and first.cluster.get_job(JOB).state == "stopping"
    with pytest.raises(ApprovalError, match="already approved"):  # taken once: a retry is not a second answer
        first.service.answer(approval.id, "approve", by="someone-else")
    blocker.rollback()
    blocker.close()
    cluster = first.cluster
    first.close()

    second = Steward(tmp_path, cluster=cluster)  # the restarted process finishes it at startup
    [done] = second.service.complete_answers()
    assert [o["status"] for o in done.state["outcomes"]] == ["executed"]
    assert cluster.get_job(JOB).state == "cancelled"
    assert len(answers(second.deps.audit, approval.id)) == 1 and len(forced(second.deps.audit)) == 1
    assert second.deps.approvals.incomplete() == [] and second.deps.approvals.get(approval.id).completed_at
    assert second.service.complete_answers() == []
    for _ in range(3):
        second.sweep()
    assert len(forced(second.deps.audit)) == 1 and len(answers(second.deps.audit, approval.id)) == 1
    assert second.deps.audit.verify().ok
    second.close()


def test_answer_deferred_by_a_lock_completes_before_the_next_sweep_in_the_same_process(tmp_path):
    steward = Steward(tmp_path)
    approval = steward.sweep_until_approval()
    steward.deps.audit._conn.execute("PRAGMA busy_timeout = 300")
    blocker = _lock(tmp_path / "audit.sqlite")
    assert steward.service.answer(approval.id, "approve", by="oncall-lead").state["deferred"]
    blocker.rollback()
    blocker.close()
    steward.sweep()
    assert len(forced(steward.deps.audit)) == 1 and steward.cluster.get_job(JOB).state == "cancelled"
    assert steward.deps.audit.problems() == [] and steward.deps.approvals.incomplete() == []
    steward.close()


def test_answer_when_the_approval_store_is_locked_is_not_taken_and_stays_answerable(tmp_path):
    steward = Steward(tmp_path)
    approval = steward.sweep_until_approval()
    steward.deps.approvals._conn.execute("PRAGMA busy_timeout = 300")
    blocker = _lock(tmp_path / "approvals.sqlite")
    with pytest.raises(ApprovalError, match="not taken, the request stays open"):
        steward.service.answer(approval.id, "approve", by="oncall-lead")
    blocker.rollback()
    blocker.close()
    assert steward.deps.approvals.get(approval.id).status == "pending"
    result = steward.service.answer(approval.id, "approve", by="oncall-lead")
    assert [o["status"] for o in result.state["outcomes"]] == ["executed"]
    steward.close()


@pytest.mark.parametrize("killed_at", ["before_audit", "before_resume", "before_marked_done"])
def test_a_process_killed_between_steps_completes_the_answer_exactly_once_at_restart(tmp_path, monkeypatch,
                                                                                     killed_at):
    first = Steward(tmp_path)
    approval = first.sweep_until_approval()
    if killed_at == "before_audit":
        monkeypatch.setattr(first.deps.approvals, "audit_answer", _kill)
    elif killed_at == "before_resume":
        monkeypatch.setattr(first.service.graph, "invoke", _kill)
    else:
        monkeypatch.setattr(first.deps.approvals, "mark_completed", _kill)
    with pytest.raises(Killed):
        first.service.answer(approval.id, "approve", by="oncall-lead", reason="confirmed idle")
    assert first.deps.approvals.get(approval.id).status == "approved"
    assert len(forced(first.deps.audit)) == (1 if killed_at == "before_marked_done" else 0)
    cluster = first.cluster
    first.close()

    second = Steward(tmp_path, cluster=cluster)
    second.service.complete_answers()
    assert cluster.get_job(JOB).state == "cancelled"
    assert len(forced(second.deps.audit)) == 1, "resumed exactly once"
    assert len(answers(second.deps.audit, approval.id)) == 1, "audited exactly once"
    assert second.deps.approvals.incomplete() == []
    second.sweep()
    assert len(forced(second.deps.audit)) == 1
    assert second.deps.audit.verify().ok
    second.close()


def test_expiry_whose_audit_failed_is_completed_later(tmp_path):
    steward = Steward(tmp_path)
    approval = steward.sweep_until_approval()
    steward.deps.audit._conn.execute("PRAGMA busy_timeout = 300")
    blocker = _lock(tmp_path / "audit.sqlite")
    steward.cluster.advance_to(steward.cluster.offset_s + steward.deps.policy.approvals.expire_after + 60)
    [deferred] = steward.service.expire_due()
    assert deferred.state["deferred"] and steward.deps.approvals.get(approval.id).status == "expired"
    blocker.rollback()
    blocker.close()
    steward.service.complete_answers()
    assert len(answers(steward.deps.audit, approval.id, "expired")) == 1
    assert forced(steward.deps.audit) == [] and steward.deps.approvals.incomplete() == []
    steward.close()


def test_api_answer_while_the_audit_db_is_locked_is_202_then_done_by_the_next_sweep(tmp_path):
    with client_for(settings_for(tmp_path)) as client:
        client: TestClient
        rt = client.app.state.runtime
        approval_id = sweep_with_approval(client)
        rt.deps.audit._conn.execute("PRAGMA busy_timeout = 300")
        blocker = _lock(tmp_path / "audit.sqlite")
        resp = client.post(f"/api/approvals/{approval_id}", json={"decision": "approve", "reason": "night"})
        assert resp.status_code == 202, resp.text
        assert resp.json()["approval"]["status"] == "approved" and resp.json()["outcomes"] == []
        health = client.get("/healthz")
        assert health.status_code == 503
        reasons = {r["reason"] for r in health.json()["reasons"]}
        assert {"db_locked", "answers_incomplete"} <= reasons
        assert 'steward_degraded{reason="answers_incomplete"} 1.0' in client.get("/metrics").text
        again = client.post(f"/api/approvals/{approval_id}", json={"decision": "deny"})
        assert again.status_code == 409 and "already approved" in again.json()["detail"]
        blocker.rollback()
        blocker.close()

        assert client.post("/api/sweeps").status_code == 200
        executions = client.get("/api/audit", params={"kind": "execution", "target": "a100-ondemand"}).json()
        assert [e["status"] for e in executions["entries"]] == ["executed"]
        assert client.get("/healthz").status_code == 200
