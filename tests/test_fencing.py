"""Two stewards on one data dir, each behind the real SqliteLease and SweepScheduler (a second replica, a cron
`steward sweep`), when a sweep outlives its lease: a slow SMTP server, API server or Thanos (each call may take its
30 s timeout) keeps it going past the RENEW_WHILE_SWEEPING lease durations it renews for, or the lease is taken
while it sweeps. Fencing (core/fencing.py): a sweep that no longer holds the lease makes no call that acts, and says
so; and an action's intent is settled only when its writer cannot still be carrying it out, so the steward that
takes over neither redoes nor double-counts an action on the wire. No owner is warned twice, no pod evicted twice.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time

import pytest

from agent.graph.execute import settle_interrupted
from agent.records.audit import AuditLog
from agent.scheduling.leases import SqliteLease
from agent.scheduling.scheduler import RENEW_WHILE_SWEEPING, SweepSchedule, SweepScheduler
from tests.fault_world import NOTEBOOK, World, executions

DURATION = 0.2  # seconds: the lease lapses RENEW_WHILE_SWEEPING * DURATION into a sweep that hangs
POD = "/api/v1/namespaces/ml/pods/idle-notebook"


@pytest.fixture
def world(fault_world):
    return fault_world


def scheduler(world: World, svc, holder: str) -> SweepScheduler:
    lease = SqliteLease(world.data_dir / "leases.sqlite", "gpu-steward-sweeper", holder, DURATION)
    return SweepScheduler(lambda trigger: svc.sweep(trigger=trigger), world.cluster.now, SweepSchedule(every_s=1), lease)


def warnings(world: World) -> int:
    """Warnings delivered to the notebook's owner: each annotates the pod."""
    return len(world.api.calls("PATCH", POD))


def outcomes(world: World, action: str | None = None) -> list[tuple[str, str]]:
    return [(e.status, e.reason or "") for e in executions(AuditLog(world.data_dir / "audit.sqlite"), action=action)]


def hang_while_the_other_sweeps(world: World, a, sched_a: SweepScheduler, sched_b: SweepScheduler, deps_attr: str,
                                method: str) -> tuple[tuple, tuple]:
    """A's call `deps.<deps_attr>.<method>` is on the wire (it has passed every check) for longer than A's lease is
    renewed; B takes the lease and sweeps meanwhile; then A's call returns."""
    in_flight, release = threading.Event(), threading.Event()
    owner = getattr(a.deps, deps_attr)
    real = getattr(owner, method)

    def slow(*args, **kw):
        in_flight.set()
        release.wait(20)
        return real(*args, **kw)

    setattr(owner, method, slow)
    out: dict[str, tuple] = {}
    t = threading.Thread(target=lambda: out.setdefault("a", sched_a.run_as_leader("schedule")))
    t.start()
    try:
        assert in_flight.wait(20)
        time.sleep(DURATION * RENEW_WHILE_SWEEPING + 4 * DURATION)  # A's renewals stopped; its lease lapsed
        ran_b = sched_b.run_as_leader("schedule")
    finally:
        release.set()
        t.join(20)
    return out["a"], ran_b


def test_a_warning_on_the_wire_when_the_lease_lapses_is_given_once(world):
    """Was: B settled A's warning, still on the wire, as interrupted (skipped), and warned again: the owner got two
    warnings, one action id had both `skipped` and `executed`."""
    a, b = world.service(), world.service()
    world.at(80)
    (ran_a, _), (ran_b, _) = hang_while_the_other_sweeps(world, a, scheduler(world, a, "replica-a"),
                                                          scheduler(world, b, "replica-b"), "notifier", "notify")
    assert (ran_a, ran_b) == ("ran", "ran")
    assert warnings(world) == 1
    done = outcomes(world)
    assert [s for s, _ in done].count("executed") == 1, done  # A's, when its call returned
    assert not any("interrupted" in r for _, r in done), done  # nobody settled A's intent while A carried it out
    assert any(s == "skipped" and "acting beside it would act twice" in r for s, r in done), done  # B's, said
    assert AuditLog(world.data_dir / "audit.sqlite").verify().problem == ""


def test_a_stop_on_the_wire_when_the_lease_lapses_is_sent_and_counted_once(world):
    """Was: the pod evicted twice, and both stops counted toward the rate limit."""
    world.at(80)
    world.service().sweep()  # warned; the notice ends at minute 110
    a, b = world.service(), world.service()
    world.at(110)
    (ran_a, _), (ran_b, _) = hang_while_the_other_sweeps(world, a, scheduler(world, a, "replica-a"),
                                                          scheduler(world, b, "replica-b"), "scheduler", "stop_job")
    assert (ran_a, ran_b) == ("ran", "ran")
    assert len(world.evictions()) == 1
    stops = outcomes(world, "terminate")
    assert [s for s, _ in stops].count("executed") == 1, stops
    assert not any("interrupted" in r for _, r in stops), stops


def test_a_sweep_whose_lease_was_taken_acts_on_nothing_and_says_why(world):
    """A's reads are slow (Thanos at its timeout); meanwhile another steward takes the lease (A's row is made to
    look expired: a renewal that could not reach the store in time). A's renewal thread sees the loss; A, reading
    the cluster as if it still swept, makes no call that acts, and its audit and report say why."""
    a = world.service()
    sched_a = scheduler(world, a, "replica-a")
    world.at(80)
    reading, taken = threading.Event(), threading.Event()
    real_observe = a.deps.observe

    def slow_observe(*args, **kw):
        obs = real_observe(*args, **kw)
        reading.set()
        assert taken.wait(20)
        time.sleep(DURATION)  # A's renewal thread tries within a third of the duration and finds the lease gone
        return obs

    a.deps.observe = slow_observe
    out: dict[str, tuple] = {}
    t = threading.Thread(target=lambda: out.setdefault("a", sched_a.run_as_leader("schedule")))
    t.start()
    try:
        assert reading.wait(20)
        # B takes the lease in one statement: A's renewal thread (every DURATION / 3) cannot slip in between an
        # expiry and B's acquire, as it did once on a loaded CI machine.
        with sqlite3.connect(world.data_dir / "leases.sqlite") as conn:
            conn.execute("UPDATE leases SET holder = 'replica-b', expires_at = ?", (time.time() + 600,))
        other = SqliteLease(world.data_dir / "leases.sqlite", "gpu-steward-sweeper", "replica-b", 600)
        assert other.acquire()  # B holds it: a renewal
    finally:
        taken.set()
        t.join(20)
    ran, result = out["a"]
    assert ran == "ran" and warnings(world) == 0
    (status, reason), = outcomes(world)
    assert status == "skipped" and "no longer holds the sweeper lease" in reason
    assert "another steward took the sweeper lease" in reason
    assert "not done: this steward lost the sweeper lease" in result.report


def test_an_intent_is_settled_only_when_its_writer_cannot_still_be_acting(world):
    """An intent without an outcome, from a run without a report, is not proof that its writer stopped. One written
    by a live process (here: on another host) is left alone, and its target not acted on, until LIVE_ACTION has
    passed; one whose process on this host has ended is settled at once."""
    svc = world.service()
    world.at(80)
    now = world.cluster.now()

    def intent(target: str, writer: str, action_id: str) -> None:
        svc.deps.audit.record("intent", at=now, run_id=f"run-{action_id}", target=target, action="notify", level=1,
                              status="acting", reason=f"about to notify {target}",
                              data={"action_id": action_id, "finding_kind": "idle", "gpus": 2,
                                    "writer": writer, "process": f"{writer.rpartition('/')[2]}:elsewhere"})

    intent(NOTEBOOK, "steward-elsewhere/1", "elsewhere")
    dead = os.spawnlp(os.P_NOWAIT, "true", "true")
    os.waitpid(dead, 0)
    intent("ml/training", f"{socket.gethostname() or 'localhost'}/{dead}", "gone")
    settled = settle_interrupted(svc.deps, "settle-1")
    assert [o.id for o in settled] == ["gone"]  # its process has ended: it cannot be acting
    svc.sweep()
    assert warnings(world) == 0  # the notebook's warning is another steward's to give now
    (status, reason), = outcomes(world)
    assert status == "skipped" and "steward-elsewhere/1 has been carrying out notify" in reason
    world.at(91)  # LIVE_ACTION (10 minutes) after the intent
    svc.sweep()  # long after any call could still be on the wire: settled, and the owner warned
    assert [s for s, _ in outcomes(world)] == ["skipped", "skipped", "executed"]
    assert "interrupted at" in outcomes(world)[1][1] and warnings(world) == 1
