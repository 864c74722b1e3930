"""Scheduled sweeps: interval and cron, one sweep at a time, one sweeping replica (SQLite and Kubernetes leases)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.scheduling.k8s_lease import KubernetesLease
from agent.scheduling.leases import SqliteLease
from agent.scheduling.scheduler import ScheduleError, SweepSchedule, SweepScheduler

T0 = datetime(2026, 11, 2, 14, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, at: datetime = T0) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def wall(self) -> float:
        return self.at.timestamp()


def test_interval_and_cron_schedules():
    assert SweepSchedule(every_s=300).next_after(T0) == T0 + timedelta(minutes=5)
    cron = SweepSchedule(cron="*/15 * * * *")
    assert cron.next_after(T0 + timedelta(minutes=1)) == T0 + timedelta(minutes=15)
    with pytest.raises(ScheduleError, match="not a valid cron"):
        SweepSchedule(cron="every five minutes")
    with pytest.raises(ScheduleError, match="positive"):
        SweepSchedule(every_s=0)


def test_ticks_run_when_due_only():
    clock, runs = FakeClock(), []
    scheduler = SweepScheduler(runs.append, clock.now, SweepSchedule(every_s=300))
    assert scheduler.tick() == "not_due"  # first tick only sets the next time
    clock.at += timedelta(minutes=4)
    assert scheduler.tick() == "not_due"
    clock.at += timedelta(minutes=1)
    assert scheduler.tick() == "ran"
    assert runs == ["schedule"]
    assert scheduler.next_due == clock.at + timedelta(minutes=5)


def test_an_overrunning_sweep_is_not_started_twice():
    clock, started, release = FakeClock(), threading.Event(), threading.Event()
    calls = []

    def slow_sweep(trigger: str) -> str:
        calls.append(trigger)
        started.set()
        assert release.wait(timeout=30)
        return "done"

    scheduler = SweepScheduler(slow_sweep, clock.now, SweepSchedule(every_s=300))
    scheduler.tick()
    clock.at += timedelta(minutes=5)
    first = threading.Thread(target=scheduler.tick)
    first.start()
    assert started.wait(timeout=30)
    clock.at += timedelta(minutes=10)  # two intervals pass while the first sweep still runs
    assert scheduler.tick() == "busy"
    assert scheduler.run_now("api") == ("busy", None)
    release.set()
    first.join(timeout=30)
    assert calls == ["schedule"]
    assert scheduler.skipped_busy == 2
    assert scheduler.run_now("api") == ("ran", "done")


def test_sqlite_lease_elects_one_replica_until_it_expires(tmp_path):
    clock = FakeClock()
    a = SqliteLease(tmp_path / "leases.sqlite", "sweeper", "replica-a", duration_s=30, clock=clock.wall)
    b = SqliteLease(tmp_path / "leases.sqlite", "sweeper", "replica-b", duration_s=30, clock=clock.wall)
    assert a.acquire() and not b.acquire()
    clock.at += timedelta(seconds=20)
    assert a.acquire() and not b.acquire()  # renewed
    clock.at += timedelta(seconds=31)  # replica a died: its lease runs out
    assert b.acquire() and not a.acquire()
    assert a.current_holder() == "replica-b"
    b.release()
    assert a.acquire()


def test_scheduler_on_a_follower_does_not_sweep(tmp_path):
    clock, runs = FakeClock(), []
    leader = SqliteLease(tmp_path / "l.sqlite", "sweeper", "leader", duration_s=300, clock=clock.wall)
    assert leader.acquire()
    follower = SweepScheduler(runs.append, clock.now, SweepSchedule(every_s=60),
                              SqliteLease(tmp_path / "l.sqlite", "sweeper", "follower", clock=clock.wall))
    follower.tick()
    clock.at += timedelta(seconds=60)
    assert follower.tick() == "not_leader" and runs == [] and follower.leader is False


def test_an_on_demand_sweep_runs_only_where_the_lease_is(tmp_path):
    clock, runs = FakeClock(), []
    leader_lease = SqliteLease(tmp_path / "l.sqlite", "sweeper", "leader", duration_s=300, clock=clock.wall)
    leader = SweepScheduler(runs.append, clock.now, SweepSchedule(every_s=60), leader_lease)
    follower = SweepScheduler(runs.append, clock.now, SweepSchedule(every_s=60),
                              SqliteLease(tmp_path / "l.sqlite", "sweeper", "follower", clock=clock.wall))
    assert leader.run_as_leader("api:ann") == ("ran", None) and runs == ["api:ann"]
    assert follower.run_as_leader("api:bob") == ("not_leader", None) and runs == ["api:ann"]
    leader_lease.release()
    assert follower.run_as_leader("api:bob")[0] == "ran" and runs == ["api:ann", "api:bob"]


class _LeaseApi(BaseHTTPRequestHandler):
    """Just enough of coordination.k8s.io/v1 Leases: get, create, replace with resourceVersion checks."""

    leases: dict[str, dict] = {}

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def _status(self, code: int, reason: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code})

    def do_GET(self) -> None:  # noqa: N802
        name = self.path.rstrip("/").split("/")[-1]
        if name in self.leases:
            self._send(200, self.leases[name])
        else:
            self._status(404, "NotFound")

    def do_POST(self) -> None:  # noqa: N802
        body = self._body()
        name = body["metadata"]["name"]
        if name in self.leases:
            return self._status(409, "AlreadyExists")
        body["metadata"]["resourceVersion"] = "1"
        self.leases[name] = body
        self._send(201, body)

    def do_PUT(self) -> None:  # noqa: N802
        body = self._body()
        name = self.path.rstrip("/").split("/")[-1]
        current = self.leases.get(name)
        if current is None:
            return self._status(404, "NotFound")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return self._status(409, "Conflict")
        body["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        self.leases[name] = body
        self._send(200, body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def lease_api():
    from kubernetes import client

    _LeaseApi.leases = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LeaseApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    api = client.CoordinationV1Api(client.ApiClient(config))
    yield api
    server.shutdown()


def test_kubernetes_lease_election(lease_api):
    clock = FakeClock()
    a = KubernetesLease(lease_api, "gpu-steward-sweeper", "steward", "pod-a", duration_s=30, clock=clock.now)
    b = KubernetesLease(lease_api, "gpu-steward-sweeper", "steward", "pod-b", duration_s=30, clock=clock.now)
    assert a.acquire()  # creates the Lease
    assert not b.acquire()
    clock.at += timedelta(seconds=10)
    assert a.acquire()  # renews
    stored = _LeaseApi.leases["gpu-steward-sweeper"]
    assert stored["spec"]["holderIdentity"] == "pod-a" and stored["metadata"]["resourceVersion"] == "2"
    clock.at += timedelta(seconds=29)
    assert not b.acquire()  # b sees the renewal only now: it waits a lease duration from here, whatever renewTime says
    clock.at += timedelta(seconds=30)
    assert b.acquire() and not a.acquire()  # a's lease has stood unrenewed for 30 s as b saw it: b takes over
    assert _LeaseApi.leases["gpu-steward-sweeper"]["spec"]["leaseTransitions"] == 1
    b.release()
    assert a.acquire()


def test_kubernetes_lease_loses_a_write_race(lease_api):
    clock = FakeClock()
    a = KubernetesLease(lease_api, "sweeper", "steward", "pod-a", duration_s=30, clock=clock.now)
    assert a.acquire()
    stale = lease_api.read_namespaced_lease("sweeper", "steward")
    b = KubernetesLease(lease_api, "sweeper", "steward", "pod-b", duration_s=30, clock=clock.now)
    c = KubernetesLease(lease_api, "sweeper", "steward", "pod-c", duration_s=30, clock=clock.now)
    assert not b.acquire()  # both see pod-a's record and wait a lease duration for it to stand unrenewed
    original = lease_api.read_namespaced_lease
    lease_api.read_namespaced_lease = lambda name, ns: stale
    try:
        assert not c.acquire()
    finally:
        lease_api.read_namespaced_lease = original
    clock.at += timedelta(seconds=60)
    assert b.acquire()
    # pod-c read the Lease before pod-b wrote it: its replace carries an old resourceVersion and is refused.
    lease_api.read_namespaced_lease = lambda name, ns: stale
    try:
        assert not c.acquire()
    finally:
        lease_api.read_namespaced_lease = original
    assert _LeaseApi.leases["sweeper"]["spec"]["holderIdentity"] == "pod-b"


def test_the_lease_is_renewed_while_a_sweep_outlasts_it(tmp_path):
    clock, started, release = FakeClock(), threading.Event(), threading.Event()

    def slow_sweep(trigger: str) -> str:
        started.set()
        assert release.wait(timeout=30)
        return "done"

    def lease(holder: str) -> SqliteLease:  # on the wall clock: it lapses on its own unless renewed
        return SqliteLease(tmp_path / "l.sqlite", "sweeper", holder, duration_s=0.6)

    leader = SweepScheduler(slow_sweep, clock.now, SweepSchedule(every_s=60), lease("leader"))
    other = SweepScheduler(lambda trigger: "second", clock.now, SweepSchedule(every_s=60), lease("other"))
    leader.tick(), other.tick()
    clock.at += timedelta(seconds=60)
    first = threading.Thread(target=leader.tick)
    first.start()
    try:
        assert started.wait(timeout=30)
        time.sleep(2.0)  # more than three lease durations into the sweep
        assert other.tick() == "not_leader"
    finally:
        release.set()
        first.join(timeout=30)
