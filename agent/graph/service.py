"""Runs sweeps and approval threads on the graph; the one place that starts graph runs.

An answer is taken in three steps: recorded in the approval store (durable; this is what makes it exactly
once), audited, then the waiting graph thread is resumed with it; the store marks it completed after both.
When the audit or the resume fails (audit DB locked, a backend error, the process killed), the answer stays
recorded and incomplete, and `complete_answers` finishes it (before each sweep, and at startup): each
step is skipped when already done, so the graph is resumed exactly once.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from langgraph.types import Command

from agent.detectors.engine import run_detectors
from agent.graph.builder import build_graph
from agent.graph.deps import StewardDeps
from agent.graph.execute import execute_action, fresh_facts, remember_outcome
from agent.guardrail.decide import decide
from agent.guardrail.protection import as_utc
from agent.guardrail.runbook_limits import limit_by_runbook
from agent.records.approvals import Approval, ApprovalError
from core.actions import ActionOutcome, Finding, GuardedAction, ProposedAction
from core.observation import Observation

log = logging.getLogger("steward.service")
KEEP_SWEEP_THREADS = 12  # finished sweeps whose checkpoints are kept (an hour at the default 5-minute interval)


@dataclass
class SweepResult:
    run_id: str
    report: str
    state: dict[str, Any]
    approvals: list[Approval] = field(default_factory=list)
    answered: list[SweepResult] = field(default_factory=list)  # answers carried out before this sweep


class SweepService:
    def __init__(self, deps: StewardDeps, checkpointer: Any = None, *, run_prefix: str = "sweep") -> None:
        if checkpointer is None:
            from langgraph.checkpoint.memory import InMemorySaver

            checkpointer = InMemorySaver()
        self.deps = deps
        self.checkpointer = checkpointer
        self.graph = build_graph(deps, checkpointer=checkpointer)
        self.run_prefix = run_prefix
        self._seq = itertools.count(1)
        # Run ids are thread ids in the shared checkpoint store and group the audit: a server and a cron sweep on
        # one data dir, started in the same second, must not share one (each process counts from 1).
        self._process = uuid.uuid4().hex[:6]
        self._recent_sweeps: deque[str] = deque()

    def _config(self, thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}, "recursion_limit": 50}

    def sweep(self, trigger: str = "cli") -> SweepResult:
        """One sweep; actions that need a human each get an approval thread, left waiting. Answers given since the
        last sweep (a CLI approval, one a restart left unfinished) are carried out first, and returned with it."""
        answered = self.complete_answers()
        self.expire_due()
        now = self.deps.clock.now()
        run_id = f"{self.run_prefix}-{now:%Y%m%dT%H%M%S}-{self._process}-{next(self._seq)}"
        state = self.graph.invoke({"mode": "sweep", "run_id": run_id, "trigger": trigger}, self._config(run_id))
        opened = [self._open_approval(GuardedAction.model_validate(raw), run_id)
                  for raw in state.get("approval_requests", [])]
        self._forget_old_sweeps(run_id)
        return SweepResult(run_id=run_id, report=state.get("report", ""), state=state, approvals=opened,
                           answered=answered)

    def _forget_old_sweeps(self, run_id: str) -> None:
        """A sweep's own thread is finished when it returns (approvals wait in threads of their own) and is never
        read again: keep the newest KEEP_SWEEP_THREADS for inspection (LangGraph Studio), delete older ones, so
        the checkpoint store grows with approvals, not with every sweep. The audit log keeps the record."""
        self._recent_sweeps.append(run_id)
        while len(self._recent_sweeps) > KEEP_SWEEP_THREADS:
            old = self._recent_sweeps.popleft()
            try:
                self.checkpointer.delete_thread(old)
            except Exception as exc:  # a store that cannot delete keeps the thread: space, never correctness
                log.warning("could not delete the checkpoints of finished sweep %s: %s", old, exc)

    def investigate(self, plan: Callable[[Observation, list[Finding]], list[ProposedAction]], runbook: str | None,
                    proposes: frozenset[str], trigger: str = "alert",
                    ) -> tuple[Observation, list[Finding], list[tuple[GuardedAction, str | None, ActionOutcome | None]]]:
        """Read the cluster, detect, and put `plan`'s proposals through the guardrail like a sweep's (audited).

        An action that needs a human gets an approval thread; one the policy allows is carried out at once.
        `runbook` is the incident's: node findings without one cite it, so its max_level applies.
        """
        deps = self.deps
        now = deps.clock.now()
        run_id = f"{trigger}-{now:%Y%m%dT%H%M%S}-{self._process}-{next(self._seq)}"
        obs = deps.observe()
        deps.remember(run_id, obs)
        findings = [f.model_copy(update={"runbook": runbook}) if runbook and not f.runbook and
                    f.target_type == "node" else f for f in run_detectors(obs, deps.policy)]
        history = deps.audit.history(obs.at)
        out: list[tuple[GuardedAction, str | None, ActionOutcome | None]] = []
        for p in plan(obs, findings):
            deps.audit.record("proposal", at=obs.at, run_id=run_id, target=p.target, action=p.action, level=p.level,
                              status="proposed", reason=p.reason, data={"proposed_by": p.proposed_by,
                                                                       "finding_kind": p.finding_kind})
            facts = fresh_facts(deps, run_id, p.target, findings, reread_job=False)
            decision = limit_by_runbook(decide(p, facts, deps.policy, history), p, findings, deps.runbook_max_level,
                                        proposes)
            ga = GuardedAction(id=f"{run_id}:{p.key()}", proposal=p, decision=decision, decided_at=obs.at)
            deps.audit.record("decision", at=obs.at, run_id=run_id, target=p.target, action=p.action,
                              level=decision.level, status=decision.verdict, reason=decision.reason,
                              data={"rule": decision.rule, "dry_run": decision.dry_run, "action_id": ga.id,
                                "proposed_by": p.proposed_by})
            if decision.verdict == "needs_approval":
                out.append((ga, self._open_approval(ga, run_id).id, None))
            elif decision.verdict == "allow":
                done = execute_action(deps, ga, run_id, run_findings=findings, history=history)
                remember_outcome(history, done, p.finding_kind)
                out.append((ga, None, done))
            else:
                out.append((ga, None, None))
        deps.audit.record("report", at=deps.clock.now(), run_id=run_id, status=trigger,
                          reason=f"investigation: {len(out)} proposal(s)")
        return obs, findings, out

    def _open_approval(self, ga: GuardedAction, run_id: str) -> Approval:
        deps = self.deps
        approval = deps.approvals.request(
            proposal_key=ga.proposal.key(), target=ga.proposal.target, action=ga.proposal.action,
            level=ga.decision.level, now=deps.clock.now(), expire_after_s=deps.policy.approvals.expire_after,
            payload={"guarded_action": ga.model_dump(mode="json"), "run_id": run_id}, run_id=run_id,
            escalation=deps.policy.approvals.escalation,
        )
        config = self._config(approval.id)
        if not self.graph.get_state(config).next:  # a new request: start its thread, which waits at interrupt()
            # The question is as old as the request (a thread lost with its checkpoint is started again for a request
            # still pending): the execute re-check refuses an approval older than the current stretch of waste.
            ga = ga.model_copy(update={"decided_at": min(as_utc(ga.decided_at), as_utc(approval.requested_at))})
            self.graph.invoke({"mode": "approval", "run_id": approval.id, "approval": {"id": approval.id},
                               "approval_requests": [ga.model_dump(mode="json")]}, config)
        return approval

    def answer(self, approval_id: str, decision: Literal["approve", "deny"], by: str, reason: str = "") -> SweepResult:
        """Take a human answer exactly once, audit it and resume the waiting graph with it.

        ApprovalError when it is not taken (unknown, already answered, expired; ApprovalUnavailable: the store
        cannot be written). Once taken it is never lost: when auditing or resuming fails, the result says it
        is deferred (state["deferred"]) and `complete_answers` finishes it later.
        """
        return self.complete_or_defer(self.take(approval_id, decision, by=by, reason=reason))

    def take(self, approval_id: str, decision: Literal["approve", "deny"], by: str, reason: str = "",
             now: datetime | None = None) -> Approval:
        """Record a human answer durably, exactly once, as of `now` (when it arrived; default the clock's now).
        The store's own conditional write makes it safe beside a running sweep; `complete_or_defer` carries it out."""
        return self.deps.approvals.answer(approval_id, decision=decision, by=by, reason=reason,
                                          now=now or self.deps.clock.now(), run_id=approval_id)

    def complete_or_defer(self, approval: Approval) -> SweepResult:
        try:
            return self.complete(approval)
        except Exception as exc:  # recorded already: finished by complete_answers, never dropped
            log.exception("approval %s (%s) recorded; auditing or resuming it failed, will complete it later",
                          approval.id, approval.status)
            self.deps.approvals.release(approval.id)
            return SweepResult(run_id=approval.id, report=deferred_report(approval, exc),
                               state={"outcomes": [], "deferred": f"{type(exc).__name__}: {exc}"})

    def complete(self, approval: Approval) -> SweepResult:
        """Audit an answered or expired request (once) and resume its graph thread with it (once), then mark it."""
        self.deps.approvals.audit_answer(approval)
        config = self._config(approval.id)
        snapshot = self.graph.get_state(config)
        if any(task.interrupts for task in snapshot.tasks):
            state = self.graph.invoke(Command(resume=_resume_value(approval)), config)
        elif snapshot.next:  # resumed before, and cut short (process killed): continue from the checkpoint
            state = self.graph.invoke(None, config)
        else:  # resumed and finished before (killed before it was marked), or no thread here to resume
            state = dict(snapshot.values) or {"outcomes": [], "report": no_thread_report(approval)}
        self.deps.approvals.mark_completed(approval.id, self.deps.clock.now())
        return SweepResult(run_id=approval.id, report=state.get("report", ""), state=state)

    def complete_answers(self) -> list[SweepResult]:
        """Finish every answer or expiry whose audit or resume did not happen; each claimed, done exactly once."""
        results = []
        for approval in self.deps.approvals.incomplete():
            if not self.deps.approvals.claim(approval.id):
                continue  # another process is completing it
            try:
                results.append(self.complete(approval))
            except Exception:  # left incomplete (reported by /healthz) and tried again next time
                log.exception("approval %s (%s) still incomplete; trying again later", approval.id, approval.status)
                self.deps.approvals.release(approval.id)
        return results

    def expire_due(self) -> list[SweepResult]:
        """Silence is never approval: overdue requests are closed as expired and nothing is done."""
        return [self.complete_or_defer(item)
                for item in self.deps.approvals.expire_due(self.deps.clock.now(), run_id="expiry")]


def _resume_value(approval: Approval) -> dict[str, Any]:
    if approval.status == "expired":
        return {"decision": "expire", "by": None, "reason": "expired"}
    if approval.status not in ("approved", "denied"):
        raise ApprovalError(f"approval {approval.id} is {approval.status}: nothing to resume with")
    return {"decision": "approve" if approval.status == "approved" else "deny", "by": approval.answered_by,
            "reason": approval.answer_reason or ""}


def deferred_report(approval: Approval, exc: BaseException) -> str:
    """What the person who answered reads when the answer is recorded but not yet carried out (en / zh)."""
    return (f"{approval.id}: {approval.status} by {approval.answered_by or 'policy'} and recorded; auditing or "
            f"carrying it out failed ({type(exc).__name__}: {exc}). It is completed automatically before the next "
            f"sweep or at restart; do not answer again.\n"
            f"{approval.id}：已记录（{approval.status}）；写入审计或执行失败（{type(exc).__name__}）。"
            f"将在下次巡检前或重启时自动完成，无需再次审批。")


def elsewhere_report(approval: Approval) -> str:
    """The answer is recorded and another steward process (a replica, a cron sweep) holds it to carry it out."""
    return (f"{approval.id}: {approval.status} by {approval.answered_by or 'policy'} and recorded; another steward "
            f"process is carrying it out. Do not answer again.\n"
            f"{approval.id}：已记录（{approval.status}）；另一个巡检进程正在执行，无需再次审批。")


def no_thread_report(approval: Approval) -> str:
    return (f"{approval.id}: {approval.status}; its graph run is gone (no durable checkpoint), so nothing was "
            f"carried out; the next sweep proposes it again if still needed.\n"
            f"{approval.id}：{approval.status}；对应的执行流程已不存在，未执行任何操作；如仍需要，下次巡检会重新提出。")
