"""Issue 18's failover: two `steward serve` processes on one Postgres, the sweeping one killed mid-sweep.

Real: two server processes (`python -m agent.cli.main serve`, started with subprocess.Popen, each with its own
port and data dir), one real Postgres (tests/conftest.py's throwaway cluster) holding the audit log, approvals,
graph checkpoints and the sweeper lease, the real `kubernetes` client and Prometheus client in each process over
HTTP, and the HTTP API answered by the survivor. Loopback stand-ins, in this test process: the Kubernetes API
server (tests/k8s_fake_api.py, one store both processes see) and Prometheus (sim/fake_prometheus.py answering
from a simulated cluster kept on the wall clock, so its GPU series agree with the pods the fake API lists).

The kill lands mid-sweep by construction: the fake API carries out the leader's first eviction of
`ml/idle-notebook` and then holds its answer (an injected Fault with `applied=True` and a long hang). The leader
is blocked inside that sweep's execute step, after auditing the intent and before it can audit the outcome or
write the sweep's report; the test SIGKILLs exactly the process whose kubeconfig token sent that request, and
checks the audit log at that moment (the intent is there, no outcome, no report for the run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.records.audit import AuditLog
from sim.cluster import SimCluster
from sim.fake_prometheus import FakePrometheus
from sim.scenario import parse_scenario
from tests.conftest import free_port, require_module
from tests.fault_world import BUSY, IDLE, SimPrometheus
from tests.k8s_fake_api import FakeKubernetesApi, Fault
from tests.k8s_fake_cluster import mirror_sim

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
LEASE_S = 6.0
SWEEP_EVERY_S = 1.0
APPROVER = "approver-token"
NOTEBOOK, DEV = "ml/idle-notebook", "research/idle-dev"
EVICT_NOTEBOOK = "/api/v1/namespaces/ml/pods/idle-notebook/eviction"
EVICT_DEV = "/api/v1/namespaces/research/pods/idle-dev/eviction"
PROTECTED = "steward.io/protected"
# Owners are warned at once and a warned idle job may be stopped at the next sweep; `research` needs a human for a
# stop (level 2 above its max_auto 1), `ml` does not. Warnings go out at any hour so the test runs at any time.
POLICY = """
version: 1
warning: {min_notice: 0s}
levels:
  max_auto: 2
  overrides:
    - {namespace: research, max_auto: 1}
notifications: {outside_hours: send, weekdays_only: false}
"""


def _scenario(start: datetime) -> dict[str, Any]:
    # A day of history before the test starts: the long-tail lookback (24h) is covered, every job idle all along.
    return {
        "version": 1, "name": "failover", "start": start, "duration": "30h", "step": "30s",
        "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 2, "price_per_gpu_hour": 4.0}],
        "jobs": [
            {"id": DEV, "user": "erin", "gpus": 2, "node": "a100-0", "phases": IDLE},
            # Protected until the approval for DEV exists, so the kill comes after an approval was opened.
            {"id": NOTEBOOK, "user": "alice", "gpus": 2, "node": "a100-0", "phases": IDLE,
             "annotations": {PROTECTED: "true"}},
            {"id": "ml/training", "user": "dave", "gpus": 2, "node": "a100-1", "phases": BUSY},
        ],
    }


class WallClockPrometheus(SimPrometheus):
    """SimPrometheus over a simulation moved to the wall clock before each answer (the servers use wall time)."""

    def sync(self) -> None:
        with self._lock:
            offset = min(time.time() - self.cluster.scenario.start.timestamp(), self.cluster.scenario.duration)
            if offset > self.cluster.offset_s:
                self.cluster.advance_to(offset)

    def __call__(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        self.sync()
        return super().__call__(path, params)


def _wait(what: str, check: Callable[[], Any], timeout_s: float, procs: list[subprocess.Popen] | None = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        for proc in procs or []:
            assert proc.poll() is None, f"a server exited ({proc.returncode}) while waiting for {what}"
        time.sleep(0.1)
    for proc in procs or []:  # its threads' stacks into its log (`steward serve` enables faulthandler)
        proc.send_signal(signal.SIGABRT)
    time.sleep(1)
    pytest.fail(f"timed out after {timeout_s:g}s waiting for {what}")


def _http(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method, headers={
        "Authorization": f"Bearer {APPROVER}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError:
        return 0, None


def _lease_holder(url: str) -> str | None:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT holder FROM leases WHERE name = 'gpu-steward-sweeper'").fetchone()
    return row[0] if row else None


def _server_env(name: str, tmp_path: Path, api: FakeKubernetesApi, prometheus_url: str, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "KUBERNETES_"))}
    env.pop("KUBECONFIG", None)
    home = tmp_path / name
    home.mkdir()
    (tmp_path / "policy.yaml").write_text(POLICY)
    env.update({
        "HOME": str(home), "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
        "PYTHONPATH": str(ROOT), "STEWARD_BACKEND": "kubernetes",
        "STEWARD_KUBECONFIG": str(api.write_kubeconfig(tmp_path / f"kubeconfig-{name}", token=name)),
        "STEWARD_PROMETHEUS_URL": prometheus_url, "STEWARD_DATABASE_URL": url,
        "STEWARD_DATA_DIR": str(home / "data"), "STEWARD_POLICY_FILE": str(tmp_path / "policy.yaml"),
        "STEWARD_SWEEP_EVERY_S": str(SWEEP_EVERY_S), "STEWARD_LEASE_DURATION_S": str(LEASE_S),
        "STEWARD_LEADER_LOCK": "postgres", "STEWARD_RUNBOOKS_ENABLED": "false",
        "STEWARD_API_TOKENS": json.dumps({APPROVER: {"name": "oncall-lead", "role": "approver"}}),
    })
    return env


def _evictions(api: FakeKubernetesApi, path: str) -> list[str]:
    """Who (kubeconfig token) sent each eviction of one pod. The test never recreates a pod, so a pod's path
    names one uid (the steward's requests carry it as a precondition too)."""
    return [auth.removeprefix("Bearer ") for method, p, auth in list(api.callers) if method == "POST" and p == path]


def test_the_survivor_takes_over_a_killed_leaders_sweep_without_acting_twice(tmp_path, postgres_url):
    require_module("psycopg")
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=25)
    cluster = SimCluster(parse_scenario(_scenario(start)))
    api = FakeKubernetesApi().start()
    answer = WallClockPrometheus(cluster)
    prometheus = FakePrometheus(answer).__enter__()
    mirror_sim(api, cluster)
    api.store.now = lambda: datetime.now(UTC)  # the servers' clock: a terminating pod goes after its grace period
    tail = api.store.log_provider

    def logs(ns: str, name: str) -> list[tuple[datetime, str]]:
        answer.sync()
        with answer._lock:  # the simulation is not thread-safe
            return tail(ns, name)

    api.store.log_provider = logs
    answer.sync()  # the day of history simulated now, not in the first sweep's first query
    # The leader's first eviction of the notebook is carried out, and its answer held back until after the kill.
    held = api.inject(Fault("POST", EVICT_NOTEBOOK, exact=True, applied=True, hang_s=120, times=1))
    ports = {"replica-a": free_port(), "replica-b": free_port()}
    procs: dict[str, subprocess.Popen] = {}
    logs_out = []
    try:
        for name, port in ports.items():
            out = (tmp_path / f"{name}.log").open("w")
            logs_out.append(out)
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "agent.cli.main", "serve", "--port", str(port)], cwd=ROOT,
                env=_server_env(name, tmp_path, api, prometheus.url, postgres_url), stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        everyone = list(procs.values())
        for port in ports.values():
            _wait("both servers to answer", lambda p=port: _http(p, "GET", "/api/status")[0] == 200, 60, everyone)

        # 1. One of them sweeps: DEV is warned, then its stop waits for a human. Any replica serves the inbox.
        def pending_dev() -> list[dict]:
            status, page = _http(ports["replica-a"], "GET", "/api/approvals")
            return [a for a in page["pending"] if a["target"] == DEV] if status == 200 else []

        asked = _wait("an approval for the research job's stop", pending_dev, 60, everyone)[0]
        assert _http(ports["replica-b"], "GET", "/api/approvals")[1]["pending"][0]["id"] == asked["id"]
        assert not api.calls("POST", "/eviction") and not api.calls("DELETE")

        # 2. The notebook loses its protection: warned at the next sweep, evicted at the one after, mid-sweep kill.
        api.store.patch("pods", "ml", "idle-notebook", {"metadata": {"annotations": {PROTECTED: None}}}, "merge")
        _wait("the leader's eviction of the notebook to be carried out", lambda: held.times == 0 and api.store.get(
            "pods", "ml", "idle-notebook")["metadata"].get("deletionTimestamp"), 60, everyone)
        [leader_name] = _evictions(api, EVICT_NOTEBOOK)
        leader, survivor = procs[leader_name], next(p for n, p in procs.items() if n != leader_name)
        survivor_name = next(n for n in procs if n != leader_name)
        killed_holder = _lease_holder(postgres_url)
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(30)

        # Mid-sweep: the intent is audited, its outcome and the sweep's report are not.
        log = AuditLog(postgres_url, readonly=True)
        intents = [e for e in log.entries(kind="intent", target=NOTEBOOK, limit=100) if e.action == "terminate"]
        assert len(intents) == 1, intents
        killed_run = intents[0].run_id
        assert not [e for e in log.entries(kind="execution", target=NOTEBOOK, limit=100) if e.action == "terminate"]
        assert not log.entries(kind="report", run_id=killed_run, limit=10)

        # 3. The survivor takes the lease (after it lapses: LEASE_S from the killed one's last renewal) and sweeps:
        # it settles the interrupted eviction from fresh state instead of evicting again.
        _wait("the survivor to hold the sweeper lease", lambda: _lease_holder(postgres_url) not in (None, killed_holder),
              LEASE_S + 60, [survivor])

        def settled() -> list:
            found = AuditLog(postgres_url, readonly=True).entries(kind="execution", target=NOTEBOOK, limit=100)
            return [e for e in found if e.action == "terminate" and e.data.get("interrupted_run") == killed_run]

        [recovered] = _wait("the survivor to settle the interrupted eviction", settled, 60, [survivor])
        assert recovered.status == "executed", recovered
        reports_then = len(AuditLog(postgres_url, readonly=True).entries(kind="report", limit=10_000))
        _wait("three more sweeps by the survivor", lambda: len(AuditLog(postgres_url, readonly=True).entries(
            kind="report", limit=10_000)) >= reports_then + 3, 60, [survivor])

        # 4. The approval asked before the kill is still open, and the survivor carries it out once.
        status, page = _http(ports[survivor_name], "GET", "/api/approvals")
        assert status == 200 and [a["id"] for a in page["pending"]] == [asked["id"]], page
        status, result = _http(ports[survivor_name], "POST", f"/api/approvals/{asked['id']}",
                               {"decision": "approve", "reason": "confirmed idle"})
        assert status == 200, result
        assert [(o["action"], o["status"]) for o in result["outcomes"]] == [("terminate", "executed")], result
        status, again = _http(ports[survivor_name], "POST", f"/api/approvals/{asked['id']}", {"decision": "deny"})
        assert status == 409, again
        reports_then = len(AuditLog(postgres_url, readonly=True).entries(kind="report", limit=10_000))
        _wait("two more sweeps by the survivor", lambda: len(AuditLog(postgres_url, readonly=True).entries(
            kind="report", limit=10_000)) >= reports_then + 2, 60, [survivor])

        # Each pod was evicted once, by whoever held the sweep (the notebook by the killed leader, DEV by the
        # survivor on the answer); nothing was force-deleted; the chain verifies.
        assert _evictions(api, EVICT_NOTEBOOK) == [leader_name]
        assert _evictions(api, EVICT_DEV) == [survivor_name]
        assert not api.calls("DELETE", "/pods/")
        log = AuditLog(postgres_url, readonly=True)
        assert log.verify().ok, log.verify().describe()
        stops = [(e.target, e.status) for e in log.entries(kind="execution", limit=10_000)
                 if e.action in ("terminate", "force_terminate") and e.status == "executed"]
        assert sorted(stops) == sorted([(DEV, "executed"), (NOTEBOOK, "executed")]), stops
        assert len(log.entries(kind="approval", status="approved", limit=100)) == 1

        # A clean stop hands the lease back at once.
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after its clean shutdown
        assert _lease_holder(postgres_url) is None
    except BaseException:
        for out in logs_out:
            out.flush()
        for name in procs:
            sys.stderr.write(f"--- {name} ---\n{(tmp_path / f'{name}.log').read_text()[-6000:]}\n")
        raise
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        for out in logs_out:
            out.close()
        answer.wake()
        prometheus.__exit__(None, None, None)
        api.stop()

