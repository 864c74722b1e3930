"""The running steward behind the API: one sweep service, the simulated clock, the schedule and events."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, Literal

from agent.api.snapshot import Snapshots
from agent.graph.deps import brief_error
from agent.graph.digest import DigestSchedule
from agent.graph.service import SweepResult, SweepService, deferred_report, elsewhere_report
from agent.records.approvals import Approval, ApprovalError, ApprovalUnavailable
from agent.records.audit import AuditEntry
from agent.records.savings import CONFIRMED, confirm_stops
from agent.records.store import Problem, StoreUnavailable
from agent.scheduling.leases import LeaderLease
from agent.scheduling.scheduler import SweepSchedule, SweepScheduler
from core.actions import Finding
from core.observation import Observation

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
        self.snapshots = Snapshots(self)  # read views built once per sweep and audit state (agent/api/snapshot.py)
        self.scheduler = SweepScheduler(self._sweep, self.deps.clock.now, schedule, lease)
        self.latest: SweepResult | None = None
        self.listeners: list[Callable[[StewardEvent], None]] = []
        self.sweeps_total = 0
        self.llm_tokens_total = 0
        self.chat_bounds: dict[str, int] = {}  # max_tool_calls_per_turn / max_tool_args_bytes from settings
        self.zone: tzinfo = UTC  # the time zone people read times in (STEWARD_DISPLAY_TZ)
        self.tick_s = tick_s
        # Readers outside a sweep (chat, exemptions) wait this long for a running sweep, then use the newest
        # reading this process holds: a first sweep that builds the runbook index must not block them.
        self.read_wait_s = 2.0
        # A cluster reading this young (cluster time) answers a question as well as a new one: metrics are scraped
        # every 15-60 s, and a sweep's own reading is reused until then.
        self.fresh_for_s = 60.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sweep_error: Problem | None = None  # the last scheduled tick failed (agent/api/health.py reports it)
        # What the UI's live status shows (GET /api/status, /api/events): cluster times of the running sweep's
        # start and of the last finished one.
        self.sweep_started_at: datetime | None = None
        self.last_finished_at: datetime | None = None
        self.digest: DigestSchedule | None = None  # the scheduled cost digest (STEWARD_DIGEST_CRON), leader only
        # What /healthz reports besides the audit and approval stores (agent/api/health.py): the data dir, probed
        # for writability, and other stores by name (ChatOps replay and link stores, alerts), each a getter that
        # returns the store, or None while it is not open.
        self.data_dir: Path | None = None
        self.stores: dict[str, Callable[[], Any]] = {}

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        try:  # an answer a killed process took but did not carry out is finished first
            self.complete_answers()
        except Exception:  # e.g. the approval store is locked: tried again before each sweep
            log.exception("could not complete recorded answers at startup")
        self._thread = threading.Thread(target=self._loop, name="steward-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.scheduler.lease.release()
        if self.sim_clock is not None:
            with self.graph_lock:
                try:
                    self.sim_clock.save()
                except OSError as exc:  # an unwritable data dir: the next start begins where the last save was
                    log.warning("simulated clock not saved: %s", exc)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception as exc:  # logged and retried at the next due time; the server stays up, degraded
                detail = f"scheduled sweep failed: {type(exc).__name__}: {exc}"
                if self.sweep_error is None or self.sweep_error.detail != detail:  # once, not every tick
                    log.exception(detail)
                self.sweep_error = Problem("sweep_failing", detail)
            else:
                self.sweep_error = None

    def write_blocked(self) -> Problem | None:
        """Why nothing can be recorded at all (a store opened read-only), or None. Nothing is swept then:
        what cannot be audited is not done."""
        return self.deps.audit.readonly or self.deps.approvals.readonly

    def complete_answers(self) -> list[SweepResult]:
        """Finish answers that were recorded but not audited or carried out (agent/graph/service.py)."""
        if self.write_blocked() is not None:
            return []
        with self.graph_lock:
            done = self.service.complete_answers()
        for result in done:
            self._emit(StewardEvent("approval_answered", self.deps.clock.now(),
                                    approval=self.deps.approvals.get(result.run_id), result=result))
        return done

    def tick(self) -> str:
        blocked = self.write_blocked()
        if blocked is not None:
            raise StoreUnavailable(blocked)
        if self.sim_clock is not None:
            with self.graph_lock:
                self.sim_clock.advance()
        with self.graph_lock:
            expired = self.service.expire_due()
        if expired:
            self._emit(StewardEvent("approvals_expired", self.deps.clock.now()))
        result = self.scheduler.tick()
        if self.digest is not None:
            try:  # a digest that cannot be built or posted never stops the sweeps; it is retried and audited
                with self.graph_lock:
                    self.digest.tick(self.deps, self.deps.clock.now(), self.scheduler.lease.acquire)
            except Exception:
                log.exception("scheduled digest failed")
        return result

    # --- operations --------------------------------------------------------------------------------
    def _sweep(self, trigger: str) -> SweepResult:
        blocked = self.write_blocked()
        if blocked is not None:
            raise StoreUnavailable(blocked)
        self.sweep_started_at = self.deps.clock.now()
        try:
            return self._sweep_locked(trigger)
        finally:
            self.sweep_started_at = None
            if self.sim_clock is not None:  # simulated time stands still while a sweep runs (a slow first
                self.sim_clock.restart_from(self.sim_clock.cluster.offset_s)  # one must not skip notice periods)

    def _sweep_locked(self, trigger: str) -> SweepResult:
        with self.graph_lock:
            checked = self.deps.audit.check_appended()  # appended entries still chain: else act on nothing
            broken = self.deps.audit.chain_problem
            if broken is not None or checked.problem:  # stays refused until the log is looked at and restarted
                raise StoreUnavailable(broken or Problem("audit_chain_broken", checked.problem))
            self.complete_answers()
            result = self.service.sweep(trigger=trigger)
            try:  # a job left after a SIGTERM: its GPUs now count as reclaimed (agent/records/savings.py)
                confirm_stops(self.deps.audit, self.deps.scheduler, self.deps.clock.now(), result.run_id)
            except Exception as exc:  # the scheduler cannot be read now (the sweep said so): confirmed later
                log.warning("could not confirm signalled stops this sweep: %s", brief_error(exc))
            head = self.deps.audit.check_appended().head  # what this sweep wrote; the next check starts here
        if head is not None:  # exported at each sweep: a log later cut short of this is detectable
            log.info("audit head seq=%d sha256=%s", head.seq, head.hash)
        self.latest = result
        self.last_finished_at = self.deps.clock.now()
        self.sweeps_total += 1
        for approval in result.approvals:
            self._emit(StewardEvent("approval_requested", self.deps.clock.now(), approval=approval, result=result))
        self._emit(StewardEvent("sweep_finished", self.deps.clock.now(), result=result))
        return result

    def sweep_now(self, trigger: str = "api") -> SweepResult:
        status, result = self.scheduler.run_as_leader(trigger)
        if status == "busy":
            raise SweepBusy("a sweep is already running; try again when it finishes")
        if status == "not_leader":
            holder = getattr(self.scheduler.lease, "current_holder", lambda: None)()
            raise SweepBusy(f"another replica ({holder or 'unknown'}) holds the sweeper lease, so it runs the sweeps; "
                            "ask it, or wait for its next sweep")
        return result

    def answer(self, approval_id: str, decision: Literal["approve", "deny"], by: str, reason: str = "") -> SweepResult:
        """A human answer, once; ApprovalError for a second or stale answer, UnknownApproval for a bad id."""
        asked = self.deps.approvals.get(approval_id)
        if asked is None:
            raise UnknownApproval(f"no approval with id {approval_id!r}")
        # Judged on time as of when it arrived: taken at once (the store's conditional write makes that safe beside a
        # running sweep), carried out under the graph lock. Taken after the lock, an answer 1.5 s before the deadline
        # waited out a sweep and was refused as expired.
        received = self.deps.clock.now()
        if asked.status == "pending" and asked.expires_at <= received:
            with self.graph_lock:  # a late answer meets an expired request (its expiry audited), not a pending one
                try:
                    self.service.expire_due()
                except StoreUnavailable as exc:
                    raise ApprovalUnavailable(exc.problem) from exc
        taken = self.service.take(approval_id, decision, by=by, reason=reason, now=received)
        with self.graph_lock:
            # The claim taken with the answer may have lapsed while a long sweep held the graph: take it again, or
            # leave the answer to the process that holds it (it is recorded; completing it twice would act twice).
            try:
                latest = self.deps.approvals.get(approval_id) or taken
                mine = latest.completed_at is not None or self.deps.approvals.claim(approval_id)
            except StoreUnavailable as exc:  # recorded already: completed before the next sweep, never lost
                result = SweepResult(run_id=approval_id, report=deferred_report(taken, exc),
                                     state={"outcomes": [], "deferred": f"{type(exc).__name__}: {exc}"})
            else:
                if mine:
                    result = self.service.complete_or_defer(latest)
                else:
                    result = SweepResult(run_id=approval_id, report=elsewhere_report(taken),
                                         state={"outcomes": [], "deferred": "being carried out by another process"})
        approval = self.deps.approvals.get(approval_id)
        self._emit(StewardEvent("approval_answered", self.deps.clock.now(), approval=approval, result=result))
        return result

    def exempt(self, target: str, seconds: float, by: str, reason: str) -> tuple[int, datetime]:
        """A time-boxed exemption; the guardrail reads it back through AuditLog.history."""
        now = self.deps.clock.now()
        until = now + timedelta(seconds=seconds)
        # The job's uid, so the exemption holds for that job whatever its name becomes. A job that cannot be read
        # now (squeue timed out) is kept by name: an owner's keep is never dropped for the steward's own trouble,
        # and a name matches as protection does (core.cluster.names_job: a Slurm job renamed by a namesake's suffix
        # too), erring toward protecting. A name no job has (a node's, a pool's) is kept by name.
        try:
            job = self.deps.scheduler.get_job(target) if "/" in target else None
        except Exception as exc:  # noqa: BLE001
            log.warning("keep on %s recorded by name: the job could not be read: %s", target, brief_error(exc))
            job = None
        seq = self.deps.audit.record("exemption", at=now, run_id="api", target=target, status="granted",
                                     reason=reason or "exempted by an approver",
                                     data={"until": until.isoformat(), "by": by, "target_uid": (job.uid or None) if job else None})
        return seq, until

    def exemptions(self) -> list[AuditEntry]:
        """Exemptions in force now (granted, not revoked, not yet over), newest first."""
        return self.deps.audit.exemptions(self.deps.clock.now())

    def revoke_exemption(self, target: str, by: str, reason: str) -> int | None:
        """End every exemption in force on `target` now; the audit seq, or None when none was in force."""
        live = [e for e in self.exemptions() if e.target == target]
        if not live:
            return None
        now = self.deps.clock.now()
        return self.deps.audit.record("exemption", at=now, run_id="api", target=target, status="revoked",
                                      reason=reason or "revoked by an approver",
                                      data={"until": now.isoformat(), "by": by, "revokes": [e.seq for e in live]})

    def status(self) -> dict[str, Any]:
        """The sweep loop as the UI shows it: running since, last finished, next due, scenario over, degraded."""
        from agent.api.health import health

        ended = None
        if self.sim_clock is not None:
            cluster = self.sim_clock.cluster
            ended = cluster.offset_s >= cluster.scenario.duration
        return {"cluster_time": self.deps.clock.now(), "running": self.scheduler.busy,
                "running_since": self.sweep_started_at, "last_finished_at": self.last_finished_at,
                "last_run_id": self.latest.run_id if self.latest else None, "next_due": self.scheduler.next_due,
                "sweeps": self.sweeps_total, "scenario_ended": ended,
                "pending_approvals": len(self.deps.approvals.pending()),
                "degraded": [{"reason": p.reason, "detail": p.detail} for p in health(self)]}

    def newest_observation(self) -> Observation | None:
        """The newest cluster reading this process took (a running sweep's included), without waiting."""
        taken = list(self.deps._observations.values())  # one C-level copy: safe while a sweep adds to it
        return taken[-1] if taken else None

    def sweep_observation(self) -> Observation | None:
        """The reading the latest sweep's findings were made on (held in memory, never re-read): by its run,
        else one taken at the sweep's cluster time, else the newest held."""
        taken = dict(self.deps._observations)  # one C-level copy: safe while a sweep adds to it
        latest = self.latest
        if latest is None:
            return None
        if (obs := taken.get(latest.run_id)) is not None:
            return obs
        at = latest.state.get("at")
        for obs in reversed(taken.values()):
            if at is not None and str(obs.at.isoformat()) == str(at if isinstance(at, str) else at.isoformat()):
                return obs
        return next(reversed(taken.values()), None)

    def read_cluster(self, run_id: str) -> tuple[Observation | None, bool]:
        """(reading, fresh): a reading at most `fresh_for_s` of cluster time old is fresh and is shared (every chat
        in that span reads the cluster once, without the graph lock); else a new one when the graph lock frees
        within read_wait_s, else the newest held (not fresh)."""
        newest = self.newest_observation()
        # Not while a sweep runs (or before the first has finished): the answer must then say what it is based on.
        quiet = self.latest is not None and not self.scheduler.busy
        if quiet and newest is not None and 0 <= (self.deps.clock.now() - newest.at).total_seconds() <= self.fresh_for_s:
            return newest, True
        if self.graph_lock.acquire(timeout=self.read_wait_s):
            try:
                return self.deps.fresh_observation(run_id), True
            finally:
                self.graph_lock.release()
        return self.newest_observation(), False

    def knows_target(self, name: str) -> bool | None:
        """Whether a job, node or pool of that name exists now; None when no reading is available yet."""
        if self.graph_lock.acquire(timeout=self.read_wait_s):
            try:
                deps = self.deps
                return (deps.scheduler.get_job(name) is not None
                        or any(n.name == name for n in deps.scheduler.list_nodes())
                        or any(p.name == name for p in deps.pools.list_pools()))
            finally:
                self.graph_lock.release()
        obs = self.newest_observation()
        if obs is None:
            return None
        return (any(j.id == name for j in obs.jobs) or any(n.name == name for n in obs.nodes)
                or any(p.name == name for p in obs.pools))

    def finding_states(self, findings: list[Finding]) -> dict[str, dict[str, Any]]:
        """Per target: when its owner was warned and the stop is due, whether it was stopped (gone) or only
        signalled, until when it is exempt, and a pending approval's id, from the audit log and the inbox."""
        now = self.deps.clock.now()
        history = self.deps.audit.history(now, denials_for=self.deps.policy.approvals.denials_lookback())
        pending = {a.target: a.id for a in self.deps.approvals.pending()}
        gone_at: dict[str, datetime] = {}
        for e in self.deps.audit.entries(kind=CONFIRMED, since=now - timedelta(hours=24), limit=10_000):
            gone_at.setdefault(e.target or "", e.at)
        out: dict[str, dict[str, Any]] = {}
        for f in findings:
            state: dict[str, Any] = {"warned_at": None, "advised_at": None, "stop_due_at": None, "stopped_at": None,
                                     "stopping_since": None, "exempt_until": None, "denied_until": None,
                                     "approval_id": pending.get(f.target)}
            for h in history.entries:
                if h.target != f.target or h.status != "executed":
                    continue
                if h.action == "notify" and h.deadline is None:
                    # Advice (right-size, scale a service down): told, no stop announced, so the page showed it
                    # "new". An advice finding's `since` is its window's start and moves on; the telling does not.
                    state["advised_at"] = h.at
                    continue
                if h.at < f.since:
                    continue
                if h.action == "notify":
                    state["warned_at"], state["stop_due_at"] = h.at, h.deadline
                elif h.action in ("terminate", "force_terminate"):
                    if h.detail.startswith("stopped"):
                        state["stopped_at"] = state["stopped_at"] or h.at
                    else:
                        state["stopping_since"] = state["stopping_since"] or h.at
            if state["stopping_since"] and state["stopped_at"] is None and f.target in gone_at:
                state["stopped_at"] = gone_at[f.target]
            state["exempt_until"] = max((x.until for x in history.exemptions if x.target == f.target), default=None)
            hold = timedelta(seconds=self.deps.policy.approvals.denial_holds_for)
            denied = [d.at for d in history.denials if d.target == f.target and d.at + hold > now]
            state["denied_until"] = max(denied) + hold if denied and hold else None
            out[f.target] = state
        return out

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
