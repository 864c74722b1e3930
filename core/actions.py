"""Typed records that flow through the graph: findings, proposed actions, decisions, outcomes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from core.cluster import JobInfo, names_job

FindingKind = Literal["idle", "zombie", "overprovisioned", "node_health", "oversized", "stuck_pending", "doomed",
                      "crash_loop", "idle_serving", "pool_scale_up", "quiet_fill"]
ActionKind = Literal["notify", "terminate", "force_terminate", "resize_pool", "cordon"]
Verdict = Literal["allow", "deny", "needs_approval"]
ActionStatus = Literal[
    "executed", "blocked", "pending_approval", "dry_run", "failed", "refused", "skipped", "denied_by_human", "expired"
]  # refused: the scheduler said no on purpose (e.g. a PodDisruptionBudget); not a failure

# The intervention level of each action is fixed here, never chosen by the model.
ACTION_LEVELS: dict[str, int] = {"notify": 1, "terminate": 2, "force_terminate": 3, "resize_pool": 4, "cordon": 4}
NODE_ACTIONS = frozenset({"cordon"})  # the target is a node (its uid in target_uid); no job is stopped
# The detail of a graceful stop a process was killed around, on a scheduler that shows no stopping state (Slurm): the
# SIGTERM may have gone out, and the job may be handling it, so none is sent again before the grace period is over.
UNSURE_STOP = "unknown whether the graceful stop reached the job"
STOP_ACTIONS = frozenset({"terminate", "force_terminate"})
# crash_loop: a running repeat offender, raised only when the policy turns it on (detectors.doomed.stop_repeat_offenders).
STOPPABLE_KINDS = frozenset({"idle", "zombie", "crash_loop"})


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Finding(_Record):
    """One detector's verdict on one target, with the numbers behind it."""

    kind: FindingKind
    target: str  # job id, node name or pool name
    target_type: Literal["job", "node", "pool"] = "job"
    since: datetime  # when the waste began, as far as the window shows
    detected_at: datetime
    evidence: str  # plain words with the numbers
    metrics: dict[str, float] = {}
    gpus: int = 0  # GPUs wasted (idle/zombie: all requested; overprovisioned: the unused)
    waste_gpu_hours: float = 0.0
    waste_cost: float = 0.0
    currency: str = "USD"
    owner: str | None = None
    team: str | None = None  # the job's project (Slurm account), else its namespace: who the cost report bills
    runbook: str | None = None
    # Why a stop on this finding alone needs a human (e.g. a keep-alive pattern, which real work can resemble);
    # None = the policy's levels decide. The guardrail asks for approval whatever the automatic level.
    stop_needs_approval: str | None = None
    stop_needs_approval_zh: str | None = None  # the same reason in Chinese, for the people who decide
    # The earliest a stop on this finding may land (idle/zombie): the job's own long-tail grace runs until then.
    # A warning may go out before, stating this as its deadline; the guardrail refuses a stop until it passes.
    stop_after: datetime | None = None


class ProposedAction(_Record):
    """What the planner (model or built-in policy) wants done; the guardrail decides."""

    action: ActionKind
    target: str
    reason: str = ""
    finding_kind: FindingKind | None = None
    target_nodes: int | None = None  # resize_pool only
    message: str | None = None  # notify only: the text for the owner
    proposed_by: str = "policy-model"
    target_uid: str | None = None  # the job's (JobInfo.uid) or, for cordon, the node's immutable identity when proposed

    @property
    def level(self) -> int:
        return ACTION_LEVELS[self.action]

    def key(self) -> str:
        """Stable identity used for idempotency and dedupe."""
        raw = f"{self.action}|{self.target}|{self.finding_kind}|{self.target_nodes}"
        if self.target_uid:  # a namesake is another job: its own approvals and its own dedupe
            raw += f"|{self.target_uid}"
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


class Decision(_Record):
    verdict: Verdict
    rule: str  # which guardrail rule decided
    reason: str
    level: int
    dry_run: bool = False


class GuardedAction(_Record):
    """A proposal with the guardrail's decision; what approval and execute work on."""

    id: str
    proposal: ProposedAction
    decision: Decision
    decided_at: datetime


class ActionOutcome(_Record):
    id: str
    action: ActionKind
    target: str
    level: int
    status: ActionStatus
    at: datetime
    reason: str = ""
    detail: str = ""
    gpus: int = 0
    reclaimed_gpu_hours_per_hour: float = 0.0
    approved_by: str | None = None
    target_uid: str | None = None  # the job's immutable identity this was about
    deadline: datetime | None = None  # a delivered warning: the earliest stop it announced


class HistoryEntry(_Record):
    """A past action as the guardrail sees it (from the audit log)."""

    action: ActionKind
    target: str
    status: ActionStatus
    at: datetime
    finding_kind: FindingKind | None = None
    gpus: int = 0
    deadline: datetime | None = None  # notify: when the warned stop may happen (None: advice, not a warning)
    target_uid: str | None = None  # the job's immutable identity when it happened
    detail: str = ""  # e.g. how a warning was (not) delivered
    # resize_pool (docs/forecast.md): the executed call's id, the node counts before, asked for and after (a resize
    # interrupted part way leaves the pool between the two), and a forecast scale-down's planned scale-up back (when,
    # to how many nodes); None where not recorded.
    action_id: str | None = None
    nodes_before: int | None = None
    target_nodes: int | None = None
    nodes_after: int | None = None
    scale_up_at: datetime | None = None
    scale_up_nodes: int | None = None
    seq: int | None = None  # the audit entry's sequence number: its place in the log, whatever the writer's clock said


class Exemption(_Record):
    """A time-boxed exemption an owner or approver granted ("keep 4h")."""

    target: str
    until: datetime
    by: str
    reason: str = ""
    target_uid: str | None = None  # the kept job's immutable identity, where known: it holds if the name changes
    at: datetime | None = None  # when it was granted
    seq: int | None = None  # the grant's audit sequence number: a keep answers every warning recorded before it


class DeniedAnswer(_Record):
    """A human's "deny" of an action on a target (from the audit log): it holds for `approvals.denial_holds_for`."""

    action: ActionKind
    target: str
    at: datetime
    target_uid: str | None = None  # the job's immutable identity when it was denied (None: not known)
    by: str = ""
    reason: str = ""


class History(_Record):
    entries: list[HistoryEntry] = []
    exemptions: list[Exemption] = []
    pending_approvals: list[str] = Field(default_factory=list)  # proposal keys awaiting a human
    denied_recently: list[str] = Field(default_factory=list)  # proposal keys a human denied or let expire
    denials: list[DeniedAnswer] = Field(default_factory=list)  # human denials, oldest first
    keeps: list[Exemption] = Field(default_factory=list)  # every keep granted in the lookback, in force or over
    # Entries by job and by action, so that each decision of a sweep reads its own job's past, not the whole log's
    # (a sweep deciding on hundreds of jobs over a day's thousands of entries). Built on first use and extended as
    # entries are appended (the only change a sweep makes to the list); rebuilt if the list is replaced or shrinks,
    # or on a copy of the record (which must not extend the original's index).
    _index: tuple[int, int, int, dict[tuple[str, ...], list[HistoryEntry]]] = PrivateAttr(default=(0, 0, 0, {}))

    def _indexed(self) -> dict[tuple[str, ...], list[HistoryEntry]]:
        entries = self.entries
        owner, list_id, count, index = self._index
        if owner != id(self) or list_id != id(entries) or count > len(entries):
            count, index = 0, {}
        for e in entries[count:]:
            index.setdefault(("uid", e.target_uid) if e.target_uid else ("name", e.target), []).append(e)
            index.setdefault(("action", e.action, e.status), []).append(e)
        self._index = (id(self), id(entries), len(entries), index)
        return index

    def of_job(self, uid: str | None, target: str) -> list[HistoryEntry]:
        """The entries about this very job, in log order: with a uid, those recorded with it (under whatever name);
        without one, those under its name recorded without a uid (an entry with a uid is about that job)."""
        return self._indexed().get(("uid", uid) if uid else ("name", target), [])

    def of_action(self, actions: tuple[str, ...], statuses: tuple[str, ...]) -> list[HistoryEntry]:
        """The entries of these actions with these statuses (a day of refused stops is not read for the done ones),
        in log order per action and status."""
        index = self._indexed()
        return [e for action in actions for status in statuses for e in index.get(("action", action, status), [])]


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass(frozen=True)
class KeptAt:
    """The last keep that answered a job's warnings: its time (the latest of the keeps' grant times, and of lapsed
    keep-until annotations) and its audit sequence number (the latest of the audited keeps'; None: none known)."""

    at: datetime
    seq: int | None = None

    def answers(self, entry: HistoryEntry) -> bool:
        """Whether this keep answered the warning `entry`: one recorded before the keep in the audit log (a lower
        seq, whatever the clocks of the replicas that wrote them said: a keep dated behind the warning it answered,
        or of the same time), or dated before it (a keep dated ahead of the warnings recorded after it; a warning
        not read from the log, or a lapsed keep-until annotation, whose order only their times tell)."""
        if _utc(entry.at) < _utc(self.at):
            return True
        return self.seq is not None and entry.seq is not None and entry.seq < self.seq

    @staticmethod
    def latest(marks: list[KeptAt]) -> KeptAt | None:
        """One mark answering every warning any of `marks` answers (None for none)."""
        if not marks:
            return None
        seqs = [m.seq for m in marks if m.seq is not None]
        return KeptAt(at=max((m.at for m in marks), key=_utc), seq=max(seqs) if seqs else None)


def last_keep(history: History, target: str, uid: str | None, job: JobInfo | None = None) -> KeptAt | None:
    """When the owner (or an approver) last kept this job, in force or over: a keep answers the warnings before it,
    so a stop after it lapses needs a new warning with its full notice. A job with a uid is matched by it (a keep
    recorded without one, by name); one without, by name among keeps recorded without one. `job`, where read: a
    name matches as protection does (core.cluster.names_job: a Slurm job's bare partition/jobname too)."""
    def named(name: str) -> bool:
        return name == target or (job is not None and names_job(name, job))

    return KeptAt.latest([KeptAt(k.at, k.seq) for k in history.keeps if k.at is not None
                          and ((k.target_uid == uid or (not k.target_uid and named(k.target))) if uid
                               else (named(k.target) and not k.target_uid))])
