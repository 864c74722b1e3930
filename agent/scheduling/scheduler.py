"""When to sweep (interval or cron, in cluster time) and the single-flight guard around each sweep."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Literal

from agent.scheduling.leases import AlwaysLeader, LeaderLease
from core.fencing import Fence, fenced_by

TickResult = Literal["ran", "not_due", "not_leader", "busy"]
log = logging.getLogger("steward.scheduler")
RENEW_WHILE_SWEEPING = 10  # lease durations a running sweep keeps the lease for (a longer one is taken to hang)


class ScheduleError(ValueError):
    """A sweep schedule that cannot be used (bad cron expression, non-positive interval)."""


class SweepSchedule:
    """Next sweep time after a given time: every N seconds, or a 5-field cron expression."""

    def __init__(self, every_s: float | None = None, cron: str | None = None) -> None:
        if cron:
            from croniter import croniter

            if not croniter.is_valid(cron):
                raise ScheduleError(f"sweep_cron {cron!r} is not a valid cron expression (e.g. '*/5 * * * *')")
        elif not every_s or every_s <= 0:
            raise ScheduleError(f"sweep interval must be positive, got {every_s!r}")
        self.every_s, self.cron = every_s, cron

    def next_after(self, at: datetime) -> datetime:
        if self.cron:
            from croniter import croniter

            return croniter(self.cron, at).get_next(datetime)
        assert self.every_s is not None
        return at + timedelta(seconds=self.every_s)

    def describe(self) -> str:
        return f"cron {self.cron}" if self.cron else f"every {self.every_s:g}s"


class SweepScheduler:
    """Runs `sweep` when due, on the leader only, never two at once (an overrunning sweep is not restarted)."""

    def __init__(self, sweep: Callable[[str], Any], now: Callable[[], datetime], schedule: SweepSchedule,
                 lease: LeaderLease | None = None) -> None:
        self._sweep, self._now, self.schedule = sweep, now, schedule
        self.lease = lease or AlwaysLeader()
        self._running = threading.Lock()
        self.next_due: datetime | None = None
        self.skipped_busy = 0
        self.leader = False  # whether this replica held the lease at the last due tick

    @property
    def busy(self) -> bool:
        return self._running.locked()

    def run_now(self, trigger: str) -> tuple[TickResult, Any]:
        """One sweep unless one is already running (whatever started it)."""
        if not self._running.acquire(blocking=False):
            self.skipped_busy += 1
            return "busy", None
        try:
            return "ran", self._sweep(trigger)
        finally:
            self._running.release()

    def run_as_leader(self, trigger: str) -> tuple[TickResult, Any]:
        """An on-demand sweep, only where the sweeper lease is held or can be taken: never beside a scheduled
        sweep another replica is running ("not_leader")."""
        asked_at = time.monotonic()
        if not self.lease.acquire():
            return "not_leader", None
        with self._lease_renewed(asked_at):
            return self.run_now(trigger)

    def tick(self) -> TickResult:
        now = self._now()
        if self.next_due is None:
            self.next_due = self.schedule.next_after(now)
            return "not_due"
        if now < self.next_due:
            return "not_due"
        asked_at = time.monotonic()
        self.leader = self.lease.acquire()
        if not self.leader:
            self.next_due = self.schedule.next_after(now)
            return "not_leader"
        try:
            with self._lease_renewed(asked_at):
                outcome, _ = self.run_now("schedule")
        except BaseException:
            # A failed sweep is tried again at the next due time, not at every tick.
            self.next_due = self.schedule.next_after(self._now())
            raise
        if outcome == "ran":
            # From the time the sweep finished: a slow sweep is followed by a full interval, not a burst.
            self.next_due = self.schedule.next_after(self._now())
        return outcome

    @contextmanager
    def _lease_renewed(self, asked_at: float) -> Iterator[None]:
        """Renew the lease every third of its duration while a scheduled sweep runs: a sweep longer than the lease
        (a first one building the runbook index, a slow API) must not let another replica start one alongside.
        For at most RENEW_WHILE_SWEEPING lease durations: a sweep that runs longer is taken to hang, and the lease
        lapses so that another replica sweeps.

        The sweep runs fenced (core/fencing.py): once the lease is lost, not renewed in time, or given up after
        RENEW_WHILE_SWEEPING durations, the sweep makes no further call that acts (each outcome says why), so that
        a sweep that outlives its lease never acts beside the replica that took it over. `asked_at`: when the lease
        was taken (time.monotonic(), before the call)."""
        duration = getattr(self.lease, "duration_s", None)
        if not duration:
            yield
            return
        done = threading.Event()
        fence = Fence(getattr(self.lease, "holder", "?"), float(duration), asked_at)

        def renew() -> None:
            for _ in range(3 * RENEW_WHILE_SWEEPING):
                if done.wait(duration / 3):
                    return
                try:
                    renewing_at = time.monotonic()
                    if not self.lease.acquire():
                        fence.lose("another steward took the sweeper lease")
                        log.warning("lost the sweeper lease during a sweep: it acts no more; the next sweep runs "
                                    "where the lease is held")
                        return
                    fence.renewed(renewing_at)
                except Exception:  # e.g. the database is briefly unreachable: tried again at the next third
                    log.exception("could not renew the sweeper lease during a sweep")
            fence.lose(f"the sweep ran for {RENEW_WHILE_SWEEPING} lease durations, so the sweeper lease was given up")
            log.warning("a sweep has run for %d lease durations: the lease is no longer renewed, the sweep acts no "
                        "more, and another replica may take over", RENEW_WHILE_SWEEPING)

        renewing = threading.Thread(target=renew, name="steward-lease-renewal", daemon=True)
        renewing.start()
        try:
            with fenced_by(fence):
                yield
        finally:
            done.set()
            renewing.join(timeout=5)  # a renewal in flight ends before the lease can be released (stop())
