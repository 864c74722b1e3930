"""`steward audit log --since` hint: it must name the newest entry the listing would show, not a sweep's own notes."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.cli.main import main  # noqa: F401  (as tests/test_cli_operator.py)


def test_since_hint_does_not_name_a_quiet_entry_inside_the_period(tmp_path, capsys):
    from agent.records.audit import AuditLog

    now = datetime.now(UTC)
    log = AuditLog(tmp_path / "audit.sqlite")
    # A stop two days ago; sweeps since then found nothing to act on and wrote only their report (a quiet kind).
    log.record("execution", at=now - timedelta(days=2), run_id="r1", target="gpu/idle1", action="terminate",
               level=2, status="executed", reason="1 GPU idle for 2h")
    log.record("report", at=now - timedelta(minutes=5), run_id="r2", reason="sweep report")
    log._conn.close()
    assert main(["audit", "log", "--data-dir", str(tmp_path), "--since", "1d"]) == 0
    out = capsys.readouterr().out
    assert "(no entries)" in out
    # The hint says "--since counts back from now; the newest entry is from <5 minutes ago>: a demo run's entries
    # carry its simulated times" - an entry inside the period, of a kind the listing hides: false on both counts.
    recent = f"{now - timedelta(minutes=5):%Y-%m-%d %H:%M}"
    assert recent not in out, out


def test_since_further_back_than_the_calendar_lists_everything(tmp_path, capsys):
    """`--since 99999999d` printed an OverflowError traceback (now less that is before year 1)."""
    from agent.records.audit import AuditLog

    log = AuditLog(tmp_path / "audit.sqlite")
    log.record("execution", at=datetime.now(UTC) - timedelta(days=400), run_id="r1", target="gpu/idle1",
               action="terminate", level=2, status="executed", reason="1 GPU idle for 2h")
    log._conn.close()
    for since in ("99999999d", "1000000000000d", "9" * 30 + "d"):
        assert main(["audit", "log", "--data-dir", str(tmp_path), "--since", since]) == 0, since
        assert "gpu/idle1" in capsys.readouterr().out, since


def test_report_since_further_back_than_the_calendar_covers_everything(tmp_path, capsys):
    """`steward report --since 99999999d` printed an OverflowError traceback too."""
    from agent.records.audit import AuditLog

    now = datetime.now(UTC)
    log = AuditLog(tmp_path / "audit.sqlite")
    for hours in (30 * 24, 1):
        log.record("usage", at=now - timedelta(hours=hours), run_id=f"r{hours}", data={"pools": {}, "jobs": []})
    log._conn.close()
    args = ["report", "--audit", str(tmp_path / "audit.sqlite"), "--out", str(tmp_path / "out")]
    assert main([*args, "--since", "99999999d"]) == 0  # an OverflowError traceback before
    assert f"{now - timedelta(days=30):%Y-%m-%d %H:%M} to " in capsys.readouterr().out  # from the first sample
