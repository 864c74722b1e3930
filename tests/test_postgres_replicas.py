"""Two steward runtimes (replicas) on one Postgres (STEWARD_DATABASE_URL): one sweeper lease between them, the
audit chain, approvals and graph checkpoints shared, so an approval asked by one replica is answered and carried
out on the other, exactly once."""

from __future__ import annotations

import pytest

from agent.api.build import fast_forward, simulated_runtime
from agent.api.runtime import SweepBusy
from agent.config.settings import Settings
from agent.records.approvals import ApprovalError
from agent.records.audit import AuditLog
from agent.scheduling.leases import SqliteLease

HOUR = 3600.0


def test_a_second_replica_answers_and_resumes_what_the_first_asked(tmp_path, postgres_url):
    settings = Settings(data_dir=tmp_path, database_url=postgres_url, sweep_every_s=300, lease_duration_s=3600)
    first = simulated_runtime(settings, speed=0)
    assert isinstance(first.scheduler.lease, SqliteLease) and first.scheduler.lease.problem is None
    assert first.scheduler.lease.acquire()
    until = 0.0
    while not first.deps.approvals.pending() and until < 8 * HOUR:  # the demo's forced stop of a job that
        until += HOUR / 2  # ignored its SIGTERM comes to wait for a human within a few hours
        fast_forward(first, until_s=until)
    force = next(a for a in first.deps.approvals.pending() if a.action == "force_terminate")

    second = simulated_runtime(settings, speed=0)  # another pod: same database, its own connections
    assert not second.scheduler.lease.acquire()  # the first holds the sweep
    with pytest.raises(SweepBusy, match="holds the sweeper lease"):  # POST /api/sweeps on it answers 409
        second.sweep_now("api:someone")
    assert [a.id for a in second.deps.approvals.pending()] == [a.id for a in first.deps.approvals.pending()]
    second.answer(force.id, "approve", by="oncall-lead", reason="confirmed idle")
    with pytest.raises(ApprovalError, match="already approved"):
        first.answer(force.id, "deny", by="someone-else")

    log = AuditLog(postgres_url, readonly=True)
    assert log.verify().ok, log.verify().describe()
    forced = log.entries(kind="execution", target="cv-team/augment-worker", limit=1000)
    # Resumed once, on the second replica, from the first one's checkpoint: one decision on the forced stop.
    # Each replica here simulates its own copy of the cluster, so the second's fresh re-check may refuse (its copy
    # never saw the first's SIGTERM); what matters is that the graph went on exactly once, there.
    decided = [e for e in forced if e.action == "force_terminate"]
    assert len(decided) == 1 and decided[0].run_id == force.id, [(e.status, e.reason) for e in decided]
    assert len(log.entries(kind="approval", status="approved")) == 1
    assert first.deps.approvals.incomplete() == []
    assert first.complete_answers() == [] and second.complete_answers() == []  # nothing left to resume twice
    first.scheduler.lease.release()
    assert second.scheduler.lease.acquire()


def test_the_cli_reads_and_answers_on_the_shared_database(tmp_path, postgres_url, monkeypatch, capsys):
    """`steward approvals` and `steward audit verify` on a replica's pod (no --data-dir) use STEWARD_DATABASE_URL:
    the approvals and the audit every replica writes, not an empty data dir."""
    from agent.cli.main import main

    settings = Settings(data_dir=tmp_path / "server", database_url=postgres_url, sweep_every_s=300,
                        lease_duration_s=3600)
    server = simulated_runtime(settings, speed=0)
    until = 0.0
    while not server.deps.approvals.pending() and until < 8 * HOUR:
        until += HOUR / 2
        fast_forward(server, until_s=until)
    [asked] = server.deps.approvals.pending()
    server.sim_clock.save()  # where the simulated clock stands, as a running server keeps it
    monkeypatch.setenv("STEWARD_DATABASE_URL", postgres_url)
    # The server's data dir holds its simulated clock (sim-clock.json) but no store: those are all in Postgres.
    monkeypatch.setenv("STEWARD_DATA_DIR", str(tmp_path / "server"))
    assert not (tmp_path / "server" / "approvals.sqlite").exists()
    assert main(["approvals", "list"]) == 0
    assert asked.id in capsys.readouterr().out
    assert main(["approvals", "approve", asked.id, "--reason", "checked"]) == 0
    assert server.deps.approvals.get(asked.id).status == "approved"
    assert main(["audit", "verify"]) == 0
    out = capsys.readouterr().out
    assert "audit log postgresql://" in out and "NOT intact" not in out
