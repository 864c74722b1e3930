"""Issue 13, finding 7: degraded, not dead. A read-only data dir, read-only store files or a cluster backend that
does not answer keep the server up; /healthz says 503 and why, /metrics has steward_degraded{reason=...}, and
nothing is swept or done that could not be audited."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.records.audit import AuditLog
from agent.records.store import READONLY, open_store, probe_dir
from tests.conftest import free_port
from tests.records_world import as_unprivileged
from tests.test_server_api import client_for, settings_for, sweep_with_approval
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
