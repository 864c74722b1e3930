"""An approver's 30-day keep holds however many keeps came after it. AuditLog.exemptions read only the newest 10,000
exemption entries of 31 days: on a big cluster, owners answering warnings with "keep" write ~1,000 a day, so by day
10 the approver's keep on a benchmark job fell out of the read and the guardrail warned and stopped the kept job.
Every grant whose end is ahead is read now (an index on the exemption's end), and every revocation of one, on SQLite
and on Postgres; an older log gets the indexes at its first open and reads the same."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.config.policy import Policy
from agent.guardrail.decide import Facts, decide
from agent.records.audit import CONTENT, AuditLog, entry_hash
from core.actions import Finding, ProposedAction
from core.cluster import JobInfo

T = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
JOB = JobInfo(id="bench/mlperf-0", uid="uid-bench", scheduler="kubernetes", namespace="bench", name="mlperf-0",
              user="carol", gpus=8, state="running", started_at=T - timedelta(days=1))


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path) -> Callable[[str], str]:
    if request.param == "sqlite":
        return lambda name: str(tmp_path / f"{name}.sqlite")
    url = request.getfixturevalue("postgres_url")
    return lambda name: url


def _raw(location: str) -> Any:
    if location.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(location, autocommit=True)
    return sqlite3.connect(location, isolation_level=None)


def _grant(audit: AuditLog, at: datetime, target: str, until: datetime | str, uid: str, by: str = "lead") -> int:
    return audit.record("exemption", at=at, run_id="api", target=target, status="granted", reason="benchmark month",
                        data={"until": until if isinstance(until, str) else until.isoformat(), "by": by,
                              "target_uid": uid})


def _owners_keeps(location: str, n: int) -> None:
    """n owners' one-hour keeps on their notebooks, one every 86 s (ten days for 10,000), appended to the chain as
    AuditLog.record writes them, in one transaction (10,000 single writes take a minute)."""
    conn = _raw(location)
    mark = "%s" if location.startswith("postgresql://") else "?"
    seq, prev = conn.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
    rows = []
    for i in range(n):
        at = T + timedelta(seconds=60 + i * 86)
        seq += 1
        item = {"seq": seq, "at": at.isoformat(), "recorded_at": datetime.now(UTC).isoformat(), "run_id": "chat",
                "kind": "exemption", "target": f"ml/nb-{i % 700}", "action": None, "level": None, "status": "granted",
                "reason": "keep", "data": json.dumps({"until": (at + timedelta(hours=1)).isoformat(), "by": f"u{i % 700}",
                                                      "target_uid": f"uid-{i % 700}"})}
        digest = entry_hash(prev, item)
        rows.append((*(item[name] for name in CONTENT), prev, digest))
        prev = digest
    cur = conn.cursor()
    cur.execute("BEGIN")
    cur.executemany(f"INSERT INTO audit ({', '.join(CONTENT)}, prev_hash, hash) VALUES "
                    f"({', '.join([mark] * (len(CONTENT) + 2))})", rows)
    cur.execute("COMMIT")
    cur.close()
    conn.close()


def _decide(audit: AuditLog, now: datetime):
    policy = Policy()
    idle = [Finding(kind="idle", target=JOB.id, since=now - timedelta(hours=6), detected_at=now, evidence="0%")]
    return decide(ProposedAction(action="notify", target=JOB.id, finding_kind="idle", target_uid=JOB.uid),
                  Facts(now=now, job=JOB, findings=idle), policy,
                  audit.history(now, denials_for=policy.approvals.denials_lookback()))


def test_a_30_day_keep_holds_whatever_else_was_kept_since(where):
    audit = AuditLog(where("audit"))
    seq = _grant(audit, T, JOB.id, T + timedelta(days=30), JOB.uid)
    _owners_keeps(where("audit"), 10_001)  # ten days of owners' keeps
    now = T + timedelta(days=10, hours=1)
    d = _decide(audit, now)
    assert d.rule == "protected", (f"kept until {T + timedelta(days=30):%Y-%m-%d} by lead; on day 10 the guardrail "
                                   f"no longer sees the keep: {d.verdict}/{d.rule}")
    live = audit.exemptions(now)
    assert seq in {e.seq for e in live} and len(live) < 100, len(live)  # the keep, and the few owners' keeps in force
    # Its revocation is read too, however late it comes.
    audit.record("exemption", at=now, run_id="api", target=JOB.id, status="revoked", reason="benchmark done",
                 data={"until": now.isoformat(), "by": "lead", "revokes": [seq]})
    assert seq not in {e.seq for e in audit.exemptions(now + timedelta(minutes=1))}
    assert _decide(audit, now + timedelta(minutes=1)).verdict == "allow"
    assert audit.verify().ok


def _indexes(location: str) -> set[str]:
    conn = _raw(location)
    sql = ("SELECT indexname FROM pg_indexes WHERE tablename = 'audit'" if location.startswith("postgresql://")
           else "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'audit'")
    found = {r[0] for r in conn.execute(sql).fetchall()}
    conn.close()
    return found


def test_an_older_log_gets_the_exemption_indexes_at_its_first_open_and_reads_the_same(where):
    location = where("audit")
    first = AuditLog(location)
    seq = _grant(first, T, JOB.id, T + timedelta(days=30), JOB.uid)
    first.close()
    conn = _raw(location)  # as a log written before the indexes: without them (and the Postgres function)
    for name in ("audit_exemption_until", "audit_exemption_revoked"):
        conn.execute(f"DROP INDEX {name}")
    if location.startswith("postgresql://"):
        conn.execute("DROP FUNCTION steward_audit_until(text)")
    conn.close()
    assert not {"audit_exemption_until", "audit_exemption_revoked"} & _indexes(location)
    reader = AuditLog(location, readonly=True)  # `steward audit ...` on the older log: read without the indexes
    assert [e.seq for e in reader.exemptions(T + timedelta(days=10))] == [seq]
    reader.close()
    audit = AuditLog(location)
    assert {"audit_exemption_until", "audit_exemption_revoked"} <= _indexes(location)
    assert [e.seq for e in audit.exemptions(T + timedelta(days=10))] == [seq]
    assert audit.verify().ok, audit.verify().describe()
    if not location.startswith("postgresql://"):  # the read goes by the index, not through every exemption
        plan = audit._conn.execute(f"EXPLAIN QUERY PLAN SELECT * FROM audit{audit._by_until} WHERE kind = "
                                   f"'exemption' AND {audit._until} >= ? AND status = 'granted'", ("2026",)).fetchall()
        assert "audit_exemption_until" in str(plan), plan


def test_an_exemption_end_in_any_offset_or_form_is_read_while_it_is_ahead(where):
    audit = AuditLog(where("audit"))
    now = datetime(2026, 11, 2, 20, 0, tzinfo=UTC)
    ends = {"2026-11-01T23:00:00-22:00": True,  # 2026-11-02 21:00 UTC, written as the day before
            "2026-11-02T21:00:00": True,  # no offset: UTC
            "2026-11-02T21:00:00Z": True,
            "2026-11-03T05:00:00+09:00": False,  # 2026-11-02 20:00 UTC: over at now
            "2026-11-01T19:59:00+00:00": False}
    seqs = {_grant(audit, now - timedelta(hours=2), f"ml/job-{i}", until, f"uid-{i}"): ahead
            for i, (until, ahead) in enumerate(ends.items())}
    weird = _grant(audit, now - timedelta(hours=2), "ml/odd", now + timedelta(hours=1), "uid-odd", by="a\x00b")
    live = {e.seq for e in audit.exemptions(now)}
    assert live == {seq for seq, ahead in seqs.items() if ahead} | {weird}, (live, seqs)
