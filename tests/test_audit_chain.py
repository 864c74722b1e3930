"""Issue 13, finding 3: the audit log is tamper-evident. `steward audit verify` accepts a fresh log and names the
first bad entry of one whose triggers were dropped and a row edited or deleted; an exported head catches a
deleted tail and a recomputed chain; a forged exemption is refused instead of obeyed."""

from __future__ import annotations

import json
import logging
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.records.audit import GENESIS, AuditLog, AuditTampered, entry_hash
from tests.records_world import JOB, Steward, forced
from tests.test_server_api import client_for, settings_for, sweep_with_approval


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A data dir whose audit log holds a real run: findings, a warning, a graceful stop, and a forced stop a
    human approved and the steward executed."""
    data_dir = tmp_path_factory.mktemp("swept")
    steward = Steward(data_dir)
    approval = steward.sweep_until_approval()
    steward.service.answer(approval.id, "approve", by="oncall-lead", reason="confirmed idle")
    steward.sweep()
    assert len(forced(steward.deps.audit)) == 1
    steward.close()
    return data_dir


@pytest.fixture
def log_dir(swept, tmp_path) -> Path:
    """A copy of the swept data dir's audit log for one test to tamper with."""
    src = sqlite3.connect(str(swept / "audit.sqlite"))
    dst = sqlite3.connect(str(tmp_path / "audit.sqlite"))
    src.backup(dst)
    src.close()
    dst.close()
    return tmp_path


def tamper(data_dir: Path, *sql: str, params: tuple = ()) -> None:
    """What the issue did: drop the append-only triggers, change rows, put the triggers back."""
    conn = sqlite3.connect(str(data_dir / "audit.sqlite"), isolation_level=None)
    triggers = [row[0] for row in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
    conn.execute("DROP TRIGGER audit_no_update")
    conn.execute("DROP TRIGGER audit_no_delete")
    for statement in sql:
        conn.execute(statement, params if "?" in statement else ())
    for trigger in triggers:
        conn.execute(trigger)
    conn.close()


def forced_seq(data_dir: Path) -> int:
    conn = sqlite3.connect(str(data_dir / "audit.sqlite"))
    [(seq,)] = conn.execute("SELECT seq FROM audit WHERE kind = 'execution' AND action = 'force_terminate'"
                            " AND status = 'executed'").fetchall()
    conn.close()
    return int(seq)


def verify(capsys, *args: str) -> tuple[int, str]:
    code = main(["audit", "verify", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_verify_accepts_a_fresh_log(log_dir, capsys):
    code, out = verify(capsys, "--data-dir", str(log_dir))
    assert code == 0, out
    count = AuditLog(log_dir / "audit.sqlite").count()
    assert f"OK: {count} entries" in out and f"head seq {count} sha256 " in out
    code, out = verify(capsys, "--data-dir", str(log_dir), "--lang", "zh")
    assert code == 0 and "校验通过" in out and f"共 {count} 条记录；链头序号 {count}" in out and "OK" not in out


def test_verify_names_an_edited_entry_whose_triggers_were_dropped(log_dir, capsys):
    seq = forced_seq(log_dir)
    tamper(log_dir, "UPDATE audit SET status = 'denied', reason = 'denied by oncall-lead' WHERE seq = ?",
           params=(seq,))
    assert AuditLog(log_dir / "audit.sqlite").entries(kind="execution", status="denied")  # the forgery reads fine
    code, out = verify(capsys, "--data-dir", str(log_dir))
    assert code == 1
    assert f"entry seq {seq} (execution force_terminate {JOB} at " in out
    assert "content does not match its hash (edited after it was written)" in out
    code, out = verify(capsys, "--data-dir", str(log_dir), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["bad_seq"] == seq and doc["entries"] == seq - 1


def test_verify_names_the_gap_a_deleted_entry_leaves(log_dir, capsys):
    seq = forced_seq(log_dir)
    tamper(log_dir, "DELETE FROM audit WHERE seq = ?", params=(seq,))
    code, out = verify(capsys, "--data-dir", str(log_dir))
    assert code == 1
    assert f"entry seq {seq + 1} " in out and f"sequence jumps from {seq - 1} to {seq + 1}: entry {seq} is missing" in out


def test_verify_reports_triggers_left_dropped(log_dir, capsys):
    conn = sqlite3.connect(str(log_dir / "audit.sqlite"), isolation_level=None)
    conn.execute("DROP TRIGGER audit_no_delete")
    conn.close()
    code, out = verify(capsys, "--data-dir", str(log_dir))
    assert code == 1 and "append-only trigger(s) missing: audit_no_delete" in out


def test_an_exported_head_catches_a_deleted_tail(log_dir, capsys, tmp_path):
    head_file = tmp_path / "head.json"
    assert main(["audit", "head", "--data-dir", str(log_dir), "--out", str(head_file)]) == 0
    head = json.loads(head_file.read_text())
    capsys.readouterr()
    tamper(log_dir, "DELETE FROM audit WHERE seq > ?", params=(head["seq"] - 3,))
    code, out = verify(capsys, "--data-dir", str(log_dir))
    assert code == 0, "what is left still chains: without the head a cut tail cannot be seen"
    code, out = verify(capsys, "--data-dir", str(log_dir), "--expect-head", str(head_file))
    assert code == 1
    assert (f"the log ends at seq {head['seq'] - 3}, before the exported head seq {head['seq']}: entries "
            f"{head['seq'] - 2}..{head['seq']} were deleted") in out


def test_an_exported_head_catches_a_chain_recomputed_after_an_edit(log_dir, capsys, tmp_path):
    head_file = tmp_path / "head.json"
    assert main(["audit", "head", "--data-dir", str(log_dir), "--out", str(head_file)]) == 0
    capsys.readouterr()
    seq = forced_seq(log_dir)
    # The forger knows the algorithm: edit the entry and rehash it and every entry after it.
    conn = sqlite3.connect(str(log_dir / "audit.sqlite"))
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM audit WHERE seq >= ? ORDER BY seq", (seq - 1,))]
    conn.close()
    running = rows[0]["hash"]
    statements = []
    for row in rows[1:]:
        if row["seq"] == seq:
            row["status"] = "denied"
        row["prev_hash"], row["hash"] = running, entry_hash(running, row)
        running = row["hash"]
        statements.append((row["status"], row["prev_hash"], row["hash"], row["seq"]))
    conn = sqlite3.connect(str(log_dir / "audit.sqlite"), isolation_level=None)
    conn.execute("DROP TRIGGER audit_no_update")
    conn.executemany("UPDATE audit SET status = ?, prev_hash = ?, hash = ? WHERE seq = ?", statements)
    conn.execute("CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit "
                 "BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END")
    conn.close()
    assert verify(capsys, "--data-dir", str(log_dir))[0] == 0  # a consistent forgery
    code, out = verify(capsys, "--data-dir", str(log_dir), "--expect-head", str(head_file))
    assert code == 1 and "differs from the exported head" in out


def test_a_bad_head_file_is_named(log_dir, capsys, tmp_path):
    bad = tmp_path / "head.json"
    bad.write_text('{"seq": 3, "hash": "xyz"}')
    code, out = verify(capsys, "--data-dir", str(log_dir), "--expect-head", str(bad))
    assert code == 2 and f"{bad}: 'hash' must be 64 lowercase hex digits" in out
    code, out = verify(capsys, "--data-dir", str(tmp_path / "nowhere"))
    assert code == 2 and "no audit log at" in out


def test_a_forged_exemption_is_refused_not_obeyed(log_dir):
    audit = AuditLog(log_dir / "audit.sqlite")
    now = audit.entries(limit=1)[0].at + timedelta(minutes=1)
    assert audit.history(now).exemptions == []
    # INSERT is not even stopped by the triggers: a row that exempts the job from every stop.
    conn = sqlite3.connect(str(log_dir / "audit.sqlite"), isolation_level=None)
    conn.execute("INSERT INTO audit (at, recorded_at, run_id, kind, target, status, reason, data) VALUES "
                 "(?, ?, 'api', 'exemption', ?, 'granted', 'forged', ?)",
                 (now.isoformat(), now.isoformat(), JOB,
                  json.dumps({"until": (now + timedelta(days=7)).isoformat(), "by": "oncall-lead"})))
    [(seq,)] = conn.execute("SELECT max(seq) FROM audit").fetchall()
    conn.close()
    with pytest.raises(AuditTampered, match=f"entry seq {seq}: exemption {JOB} .* no hash"):
        audit.history(now + timedelta(minutes=1))  # the guardrail decides nothing on a forged past
    assert [p.reason for p in audit.problems()] == ["audit_chain_broken"]
    assert audit.verify().bad_seq == seq


def test_an_older_log_keeps_its_entries_and_the_chain_starts_after_them(tmp_path, capsys):
    path = tmp_path / "audit.sqlite"
    conn = sqlite3.connect(str(path), isolation_level=None)  # the schema before the chain
    conn.executescript("""
        CREATE TABLE audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, recorded_at TEXT NOT NULL,
            run_id TEXT NOT NULL, kind TEXT NOT NULL, target TEXT, action TEXT, level INTEGER, status TEXT,
            reason TEXT, data TEXT NOT NULL DEFAULT '{}');
        CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN SELECT RAISE(ABORT, 'append-only'); END;
        CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN SELECT RAISE(ABORT, 'append-only'); END;
    """)
    for i in range(3):
        conn.execute("INSERT INTO audit (at, recorded_at, run_id, kind, target, status) VALUES (?,?,?,?,?,?)",
                     ("2026-11-02T10:00:00+00:00", "2026-11-02T10:00:01+00:00", "old", "execution", f"job-{i}",
                      "executed"))
    conn.close()
    audit = AuditLog(path)
    at = datetime(2026, 11, 2, 11, tzinfo=UTC)
    assert audit.record("report", at=at, run_id="new") == 4
    audit.record("report", at=at, run_id="new")
    result = audit.verify()
    assert result.ok and result.entries == 5 and result.legacy == 3
    [first_hashed] = audit.entries(run_id="new", newest_first=False, limit=1)
    assert first_hashed.prev_hash != GENESIS  # anchored to the older entries as they were
    audit.close()
    code, out = verify(capsys, "--data-dir", str(tmp_path))
    assert code == 0 and "(3 older than the chain" in out
    tamper(tmp_path, "UPDATE audit SET status = 'denied' WHERE seq = 2")
    code, out = verify(capsys, "--data-dir", str(tmp_path))
    assert code == 1 and "entry seq 4 " in out and "prev_hash is not the hash of the entry before it" in out


def test_the_head_is_exported_at_each_sweep_and_in_metrics(tmp_path, caplog):
    with client_for(settings_for(tmp_path)) as client, caplog.at_level(logging.INFO, logger="steward.runtime"):
        sweep_with_approval(client)
        head = client.app.state.runtime.deps.audit.head()
        assert f"audit head seq={head.seq} sha256={head.hash}" in caplog.text
        assert f"steward_audit_head_seq {float(head.seq)}" in client.get("/metrics").text


def test_a_sweep_refuses_to_act_on_a_log_rewritten_under_it(tmp_path):
    with client_for(settings_for(tmp_path)) as client:
        sweep_with_approval(client)
        conn = sqlite3.connect(str(tmp_path / "audit.sqlite"), isolation_level=None)
        conn.execute("DROP TRIGGER audit_no_delete")
        conn.execute("DELETE FROM audit WHERE seq = (SELECT max(seq) FROM audit)")
        conn.close()
        resp = client.post("/api/sweeps")
        assert resp.status_code == 503 and resp.json()["reason"] == "audit_chain_broken"
        health = client.get("/healthz")
        assert health.status_code == 503
        assert [r["reason"] for r in health.json()["reasons"]] == ["audit_chain_broken"]
        assert 'steward_degraded{reason="audit_chain_broken"} 1.0' in client.get("/metrics").text
