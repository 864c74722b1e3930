"""A steward "process" over a data dir on disk, for the records tests (issue 13: answers never lost, a
tamper-evident audit, degraded instead of dead): real SQLite stores and a durable graph checkpointer, on a small
simulated cluster whose job ignores SIGTERM, so a forced stop waits for a human."""

from __future__ import annotations

import os
import pickle
import sqlite3
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from agent.config.policy import Policy
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.records.approvals import Approval
from agent.records.audit import AuditEntry, AuditLog
from agent.wiring import simulated_deps
from sim.cluster import SimCluster
from sim.scenario import parse_scenario
from tools.notify import RecordingNotifier

JOB = "ml-team/stubborn"
SCENARIO = {
    "version": 1, "name": "stubborn", "duration": "6h", "step": "30s",
    "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 1, "min_nodes": 1, "price_per_gpu_hour": 4.0,
               "billing": "on-demand"}],
    "jobs": [{"id": JOB, "user": "bob", "gpus": 2, "sigterm": "ignores",
              "phases": [{"gpu_util": 0, "gpu_mem_gb": 10, "cpu_pct": 0.1}]}],
}


class Steward:
    """What one process holds: the stores reopened from `data_dir`, a graph checkpointed there. A second
    Steward on the same dir and cluster is the same steward after a restart."""

    def __init__(self, data_dir: Path, cluster: SimCluster | None = None) -> None:
        self.deps, own = simulated_deps(parse_scenario(SCENARIO), Policy(), PolicyModel(), data_dir=data_dir)
        self.cluster = cluster or own
        if cluster is not None:
            self.deps.metrics = self.deps.scheduler = self.deps.logs = self.deps.pools = self.deps.clock = cluster
            self.deps.notifier = RecordingNotifier(cluster)
        self._checkpoints = sqlite3.connect(str(data_dir / "checkpoints.sqlite"), check_same_thread=False)
        self.service = SweepService(self.deps, checkpointer=SqliteSaver(self._checkpoints))

    def sweep_until_approval(self) -> Approval:
        """Sweep every 5 minutes until the forced stop waits for a human."""
        minute = self.cluster.offset_s // 60
        while minute < 6 * 60:
            minute += 5
            self.cluster.advance_to(minute * 60)
            self.service.sweep()
            pending = self.deps.approvals.pending()
            if pending:
                return pending[0]
        raise AssertionError("no approval was requested")

    def sweep(self, minutes: float = 5) -> None:
        self.cluster.advance_to(self.cluster.offset_s + minutes * 60)
        self.service.sweep()

    def close(self) -> None:
        self._checkpoints.close()
        self.deps.audit.close()
        self.deps.approvals._conn.close()


def forced(audit: AuditLog) -> list[AuditEntry]:
    """Forced stops that were carried out."""
    return [e for e in audit.entries(kind="execution", target=JOB, status="executed", limit=1000)
            if e.action == "force_terminate"]


def answers(audit: AuditLog, approval_id: str, status: str = "approved") -> list[AuditEntry]:
    return [e for e in audit.entries(kind="approval", status=status, limit=1000)
            if e.data.get("approval_id") == approval_id]


def as_unprivileged(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) as a user that file modes apply to: here when this process is not root, else in a forked child
    that drops to nobody (root writes through any mode). A child killed by a signal (SIGBUS) fails the test."""
    if os.geteuid() != 0:
        return fn(*args)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            result: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            result = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        with os.fdopen(write_end, "wb") as out:
            pickle.dump(result, out)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        pytest.fail(f"the steward died of signal {os.WTERMSIG(status)}")
    kind, value = pickle.loads(data)
    if kind == "error":
        pytest.fail(value)
    return value
