"""The running steward behind the API: one sweep service, the simulated clock, the schedule and events."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from agent.graph.service import SweepResult, SweepService
from agent.records.approvals import Approval, ApprovalError
from agent.scheduling.leases import LeaderLease
from agent.scheduling.scheduler import SweepSchedule, SweepScheduler
from core.actions import Finding

log = logging.getLogger("steward.runtime")


@dataclass
class StewardEvent:
    """What listeners (ChatOps notifiers, metrics) hear: sweep_finished, approval_requested, approval_answered."""

    kind: Literal["sweep_finished", "approval_requested", "approval_answered", "approvals_expired"]
    at: datetime
    approval: Approval | None = None
    result: SweepResult | None = None


class UnknownApproval(LookupError):
    pass


class SweepBusy(RuntimeError):
    pass


@dataclass
class SimClock:
    """Advances a simulated cluster with wall time x speed, from `start_s`, until the scenario ends."""

    cluster: Any  # sim.cluster.SimCluster
    speed: float
    start_s: float
    state_file: Path | None = None
    _t0: float = field(default_factory=time.monotonic)

    def target(self) -> float:
        duration = self.cluster.scenario.duration
        return min(duration, self.start_s + (time.monotonic() - self._t0) * self.speed)

    def advance(self) -> None:
        target = self.target()
        if target > self.cluster.offset_s:
            self.cluster.advance_to(target)
            self.save()

    def save(self) -> None:
        """Remember where the simulation is, so a restarted server continues from there."""
        if self.state_file is not None:
            self.state_file.write_text(json.dumps({"scenario": self.cluster.scenario.name,
                                                   "offset_s": self.cluster.offset_s}))

    def restart_from(self, offset_s: float) -> None:
        self.start_s, self._t0 = offset_s, time.monotonic()

    @staticmethod
    def resume_offset(state_file: Path, scenario_name: str, default: float) -> float:
        """Continue a restarted server's simulation where it stopped (same scenario only)."""
        try:
            saved = json.loads(state_file.read_text())
        except (OSError, ValueError):
            return default
        return max(default, float(saved.get("offset_s", 0))) if saved.get("scenario") == scenario_name else default


class StewardRuntime:
    def __init__(self, service: SweepService, schedule: SweepSchedule, *, sim_clock: SimClock | None = None,
                 lease: LeaderLease | None = None, chat_model: Any = None, tick_s: float = 0.25) -> None:
        self.service, self.deps, self.sim_clock, self.chat_model = service, service.deps, sim_clock, chat_model
        self.graph_lock = threading.RLock()  # graph runs and clock moves never interleave
        self.scheduler = SweepScheduler(self._sweep, self.deps.clock.now, schedule, lease)
        self.latest: SweepResult | None = None
        self.listeners: list[Callable[[StewardEvent], None]] = []
        self.sweeps_total = 0
        self.llm_tokens_total = 0
        self.chat_bounds: dict[str, int] = {}  # max_tool_calls_per_turn / max_tool_args_bytes from settings
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="steward-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.scheduler.lease.release()
        if self.sim_clock is not None:
            with self.graph_lock:
                self.sim_clock.save()

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception:  # a failed sweep is logged and retried next time; the server stays up
                log.exception("scheduled sweep failed")

    def tick(self) -> str:
        if self.sim_clock is not None:
            with self.graph_lock:
                self.sim_clock.advance()
        with self.graph_lock:
            expired = self.service.expire_due()
        if expired:
            self._emit(StewardEvent("approvals_expired", self.deps.clock.now()))
        return self.scheduler.tick()

    # --- operations --------------------------------------------------------------------------------
    def _sweep(self, trigger: str) -> SweepResult:
        with self.graph_lock:
            result = self.service.sweep(trigger=trigger)
        self.latest = result
        self.sweeps_total += 1
        for approval in result.approvals:
            self._emit(StewardEvent("approval_requested", self.deps.clock.now(), approval=approval, result=result))
        self._emit(StewardEvent("sweep_finished", self.deps.clock.now(), result=result))
        return result

    def sweep_now(self, trigger: str = "api") -> SweepResult:
        status, result = self.scheduler.run_now(trigger)
        if status == "busy":
            raise SweepBusy("a sweep is already running; try again when it finishes")
        return result

    def answer(self, approval_id: str, decision: Literal["approve", "deny"], by: str, reason: str = "") -> SweepResult:
        """A human answer, once; ApprovalError for a second or stale answer, UnknownApproval for a bad id."""
        if self.deps.approvals.get(approval_id) is None:
            raise UnknownApproval(f"no approval with id {approval_id!r}")
        with self.graph_lock:
            self.service.expire_due()  # an answer after the deadline meets an expired request, not a pending one
            result = self.service.answer(approval_id, decision, by=by, reason=reason)
        approval = self.deps.approvals.get(approval_id)
        self._emit(StewardEvent("approval_answered", self.deps.clock.now(), approval=approval, result=result))
        return result

    def exempt(self, target: str, seconds: float, by: str, reason: str) -> tuple[int, datetime]:
        """A time-boxed exemption; the guardrail reads it back through AuditLog.history."""
        now = self.deps.clock.now()
        until = now + timedelta(seconds=seconds)
        seq = self.deps.audit.record("exemption", at=now, run_id="api", target=target, status="granted",
                                     reason=reason or "exempted by an approver",
                                     data={"until": until.isoformat(), "by": by})
        return seq, until

    def findings(self) -> list[Finding]:
        if self.latest is None:
            return []
        return [Finding.model_validate(f) for f in self.latest.state.get("findings", [])]

    def _emit(self, event: StewardEvent) -> None:
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:  # a broken notifier must not undo an approval or a sweep
                log.exception("event listener failed on %s", event.kind)


__all__ = ["ApprovalError", "SimClock", "StewardEvent", "StewardRuntime", "SweepBusy", "UnknownApproval"]
