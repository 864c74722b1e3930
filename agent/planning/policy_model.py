"""Planners turn findings into proposed actions; the built-in policy model needs no LLM.

The built-in model escalates one step at a time (warn, then graceful stop after the
notice period, then a forced reclaim for a job that ignored SIGTERM), which is what
the guardrail will allow anyway; the guardrail still checks every proposal.
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

from agent.config.policy import Policy
from agent.detectors.evidence import describe, duration_zh, zone_suffix
from agent.guardrail.case import signalled_state
from agent.guardrail.decide import protection_reason
from agent.guardrail.protection import (
    denial_in_force,
    exemption_reason,
    gang_protection_reason,
    keep_answered_at,
)
from agent.planning.prompts import render, template_name
from agent.records.cost import money
from core.actions import STOP_ACTIONS, STOPPABLE_KINDS, Finding, History, HistoryEntry, KeptAt, ProposedAction
from core.durations import format_duration
from core.observation import Observation
from core.pool_plans import open_scale_down, scale_up_uid
from core.text import markdown_text

if TYPE_CHECKING:
    from agent.graph.deps import StewardDeps

KIND_WORDS = {
    "en": {
        "idle": "GPUs allocated but idle",
        "zombie": "job looks hung: no progress while holding GPUs",
        "overprovisioned": "more GPUs requested than used",
        "node_health": "GPU hardware needs attention",
        "oversized": "node pool bigger than the work needs",
        "stuck_pending": "pending job that can never be scheduled as asked",
        "doomed": "job likely to fail again: its identical recent runs all failed fast",
        "crash_loop": "crash loop: a job that failed the same way many times in a row is running again",
        "idle_serving": "inference service idle: advice, it is not stopped",
        "pool_scale_up": "a pool scaled down for a quiet window is due to grow back",
        "quiet_fill": "queued low-priority work fits a predicted quiet window: advice",
    },
    "zh": {
        "idle": "GPU 已分配但处于空闲",
        "zombie": "作业疑似卡死：占用 GPU 却无进展",
        "overprovisioned": "申请的 GPU 多于实际使用",
        "node_health": "GPU 硬件需要处理",
        "oversized": "节点池规模超出实际需要",
        "stuck_pending": "排队中的作业按当前申请永远无法调度",
        "doomed": "作业很可能再次失败：最近相同的运行都很快失败",
        "crash_loop": "崩溃循环：连续多次以同样方式失败的作业又在运行",
        "idle_serving": "推理服务空闲：仅提供建议，不会停止",
        "pool_scale_up": "为低负载窗口缩容的节点池到了扩容回去的时间",
        "quiet_fill": "排队的低优先级作业可填入预测的低负载窗口：仅提供建议",
    },
}


class PlanResult(BaseModel):
    proposals: list[ProposedAction] = []
    explanation: str = ""
    model: str = "policy-model"
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_chars: int = 0
    errors: list[str] = []
    degraded: str | None = None  # why the model could not plan this sweep and the policy model did
    model_calls: int = 0  # requests sent to the model this sweep (0: nothing new to decide, or no model)
    model_latency_s: list[float] = []  # seconds per request
    cached_findings: int = 0  # findings answered by a plan the model made earlier for the same state
    answered: bool = False  # the model finished its turn: used tools or said something, then stopped (reused)


class Planner(Protocol):
    name: str

    def plan(self, findings: list[Finding], obs: Observation, history: History, deps: StewardDeps) -> PlanResult:
        ...


def _last(history: History, action: str, target: str, kind: str | None = None,
          statuses: tuple[str, ...] = ("executed",), uid: str | None = None) -> datetime | None:
    """When `action` last happened to this job; with `uid`, to this very job and not an earlier namesake, under
    whatever name it had then ("": a job whose backend gave no uid, which only records made under its name
    without one are about, as the guardrail reads them)."""
    times = [e.at for e in _done(history, action, target, kind, statuses, uid)]
    return max(times) if times else None


def _done(history: History, action: str, target: str, kind: str | None, statuses: tuple[str, ...],
          uid: str | None) -> list[HistoryEntry]:
    """The entries `_last` reads (`action` done to this job)."""
    mine = history.entries if uid is None else history.of_job(uid or None, target)  # None: every record by name
    return [e for e in mine
            if e.action == action and e.status in statuses
            and (kind is None or e.finding_kind is None or e.finding_kind == kind)
            and ((e.target_uid or "") == uid if uid else e.target == target and (uid is None or not e.target_uid))]


def stop_deadline(finding: Finding | None, policy: Policy, now: datetime) -> datetime:
    """The deadline a warning sent now states: the notice period, or the end of the job's long-tail grace when
    that is later (Finding.stop_after)."""
    deadline = now + timedelta(seconds=policy.warning.min_notice)
    if finding is not None and finding.stop_after is not None:
        deadline = max(deadline, finding.stop_after)
    return deadline


def owner_time(moment: datetime, policy: Policy, language: str) -> str:
    """A time an owner reads in a warning: in the team's zone (policy notifications.timezone, the one its working
    hours are in), named the way its readers name it (北京时间 for Asia/Shanghai in Chinese)."""
    zone = team_zone(policy)
    return f"{moment.astimezone(zone):%Y-%m-%d %H:%M}{zone_suffix(zone, language)}"


def team_zone(policy: Policy) -> tzinfo:
    """The owners' zone (policy notifications.timezone): the one their working hours and warnings are in."""
    from zoneinfo import ZoneInfo

    return ZoneInfo(policy.notifications.timezone)


def warning_message(finding: Finding, policy: Policy, now: datetime, language: str, stop_note: str = "") -> str:
    """The owner's warning. `stop_note`: the backend's word on how its stop is done and undone (a Kubernetes Job is
    suspended, a Kubeflow notebook stopped as its culler does; tools/k8s_owners.stop_note), said with the stop."""
    words = KIND_WORDS.get(language, KIND_WORDS["en"])
    label = "运行手册：" if language == "zh" else "Runbook: "
    runbook = f"{label}{finding.runbook}" if finding.runbook else ""
    # The job's name and the evidence (which may quote its log) are the cluster's text: shown as text in a chat
    # message or an e-mail, never as a link, a mention or a line of their own.
    common = {
        "job": markdown_text(finding.target),
        "kind_words": words[finding.kind],
        "evidence": markdown_text(describe(finding, language, team_zone(policy))),
        "runbook_line": runbook,
    }
    if finding.kind in STOPPABLE_KINDS:
        deadline = stop_deadline(finding, policy, now)
        grace = policy.stop.grace_period
        grace_words = duration_zh(grace) if language == "zh" else format_duration(grace)
        return render(
            template_name("notify_warning", language), now,
            waste_gpu_hours=f"{finding.waste_gpu_hours:.1f}", waste_cost=money(finding.waste_cost, finding.currency),
            deadline=owner_time(deadline, policy, language), grace=grace_words,
            stop_note=(stop_note if language == "zh" else f" {stop_note}") if stop_note else "", **common,
        )
    working = int(finding.metrics.get("gpus_working", 1))
    advice = {
        "overprovisioned": (f"request {working} GPU(s) next time" if working else
                            "run this stage as a job without GPUs, and ask for them where it uses them"),
        "node_health": "drain the node and follow the runbook",
        "oversized": "let the pool shrink or approve the resize",
        "stuck_pending": "change the request as the evidence says, or cancel the job",
        "doomed": "fix the cause the evidence names before running it again, or cancel it",
        "idle_serving": "scale it to zero between uses, or share the GPU (MIG or time-slicing)",
    }.get(finding.kind, "take a look")
    if language == "zh":
        advice = {
            "overprovisioned": (f"下次申请 {working} 块 GPU" if working else
                                "把这一阶段作为不申请 GPU 的作业运行，到用 GPU 的阶段再申请"),
            "node_health": "排空该节点并按运行手册处理",
            "oversized": "缩容节点池或批准缩容操作",
            "stuck_pending": "按上述说明修改申请，或取消该作业",
            "doomed": "先修复上述失败原因再重新运行，或取消该作业",
            "idle_serving": "空闲时缩容到零，或与其他服务共享 GPU（MIG 或时间片共享）",
        }.get(finding.kind, "请检查")
    return render(template_name("notify_advice", language), now, advice=advice, **common)


def without_held_denials(proposals: list[ProposedAction], history: History, policy: Policy,
                         now: datetime) -> tuple[list[ProposedAction], list[str]]:
    """The proposals a human's deny does not hold back (approvals.denial_holds_for), and a note per one held."""
    kept, notes = [], []
    for p in proposals:
        denied = denial_in_force(history, p.action, p.target, p.target_uid, now, policy.approvals.denial_holds_for)
        if denied is None:
            kept.append(p)
        else:
            notes.append(f"- {p.target}: {p.action} not proposed: {denied.by or 'a human'} denied it at "
                         f"{denied.at:%Y-%m-%d %H:%M} UTC; the denial holds for "
                         f"{format_duration(policy.approvals.denial_holds_for)}")
    return kept, notes


def _reask(proposal: ProposedAction, deps: StewardDeps, history: History, now: datetime) -> ProposedAction | None:
    """A proposal whose last request expired unanswered: ask again once `approvals.reask_after` has passed.

    A stop is asked again only under a fresh warning, as the guardrail requires of any stop: when the
    owner's warning is a repeat period old the owner is warned again first, and the question waits out
    the notice. None: not yet (or never: a denied request stays denied).
    """
    policy = deps.policy
    if deps.approvals.reask_due(proposal.key(), now, policy.approvals.reask_after) is None:
        return None
    if proposal.action not in STOP_ACTIONS or proposal.finding_kind not in STOPPABLE_KINDS:
        return proposal
    done = ("executed", "dry_run") if policy.mode == "dry_run" else ("executed",)
    warned = _last(history, "notify", proposal.target, proposal.finding_kind, done, uid=proposal.target_uid)
    if warned is None or now - warned >= timedelta(seconds=policy.warning.repeat_every):
        return ProposedAction(action="notify", target=proposal.target, finding_kind=proposal.finding_kind,
                              proposed_by=proposal.proposed_by, target_uid=proposal.target_uid,
                              reason=f"asking an approver again to force the stop; {proposal.reason}")
    if now - warned < timedelta(seconds=policy.warning.min_notice):
        return None
    return proposal


class PolicyModel:
    """The built-in deterministic planner: same kind of proposals an LLM would make, offline."""

    name = "policy-model"

    def plan(self, findings: list[Finding], obs: Observation, history: History, deps: StewardDeps) -> PlanResult:
        policy, now = deps.policy, obs.at
        jobs = obs.jobs_by_id()
        proposals: list[ProposedAction] = []
        notes: list[str] = []
        # One open question per target and action: a changed finding does not open a second request. Per run: an
        # open question about an earlier namesake (another user's `bash`) does not stand for this one.
        waiting = {(a.action, a.target, a.target_uid) for a in deps.approvals.pending()}
        for f in findings:
            job = jobs.get(f.target) if f.target_type == "job" else None
            if job is not None:
                why_protected = (protection_reason(job, policy, history, now)
                                 or gang_protection_reason(job, obs.jobs, policy, history, now))
                if why_protected:
                    notes.append(f"{f.target}: {f.kind}, but protected ({why_protected}); observing only")
                    continue
            elif f.target_type == "pool" and f.kind != "pool_scale_up" and (
                    why_exempt := exemption_reason(f.target, history, now)):  # a scale-up back gives nodes back
                notes.append(f"{f.target}: {f.kind}, but the pool is exempted ({why_exempt}); not resized")
                continue
            uid = (job.uid or None) if job else None
            proposal = self._next_step(f, signalled_state(job, history) if job else None, history, policy, now, uid,
                                       keep_answered_at(history, job, f.target, uid, now, obs.jobs))
            if proposal is None:
                continue
            if proposal.key() in history.pending_approvals:
                continue
            if proposal.key() in history.denied_recently:
                # A deny stands; an unanswered request is asked again after the back-off (agent/records/approvals.py).
                again = _reask(proposal, deps, history, now)
                if again is None:
                    continue
                proposal = again
                if proposal.action != "notify":
                    notes.append(f"{f.target}: {proposal.action} asked again after an unanswered request")
            if (proposal.action, proposal.target, proposal.target_uid) in waiting:
                continue
            if proposal.action == "notify":
                proposal = proposal.model_copy(update={"message": warning_message(f, policy, now, deps.language)})
            proposals.append(proposal)
        proposals, held = without_held_denials(proposals, history, policy, now)
        lines = [f"- {f.target}: {f.kind}. {f.evidence}" for f in findings]
        explanation = "\n".join(lines + [f"- {n}" for n in notes] + held) or "No waste found."
        return PlanResult(proposals=proposals, explanation=explanation, model=self.name)

    @staticmethod
    def _next_step(f: Finding, state: str | None, history: History, policy: Policy, now: datetime,
                   uid: str | None = None, kept: KeptAt | None = None) -> ProposedAction | None:
        base = {"target": f.target, "finding_kind": f.kind, "proposed_by": "policy-model", "target_uid": uid}
        repeat = timedelta(seconds=policy.warning.repeat_every)
        done = ("executed", "dry_run") if policy.mode == "dry_run" else ("executed",)
        # A job's records are its uid's; a job without one matches only records made without one (History.of_job).
        match = uid if uid is not None or f.target_type != "job" else ""
        warned = _last(history, "notify", f.target, f.kind, done, uid=match)
        if f.kind == "quiet_fill":
            return None  # advice in the sweep's findings: nothing is started, and a pool has no owner to warn
        if f.kind == "pool_scale_up":
            down = open_scale_down(history, f.target)
            target = int(f.metrics.get("target_nodes", -1))
            if down is None or target < 0:
                return None
            return ProposedAction(action="resize_pool", target_nodes=target, reason=f.evidence,
                                  **{**base, "target_uid": scale_up_uid(down)})
        if f.kind == "oversized":
            target = int(f.metrics.get("suggested_nodes", -1))
            if target < 0:
                return None
            return ProposedAction(action="resize_pool", target_nodes=target, reason=f.evidence, **base)
        if f.kind not in STOPPABLE_KINDS:
            if f.kind == "doomed":
                # About the workload across its runs (the same user, command and image failing the same way): one
                # message per period, not one per resubmitted run.
                warned = _last(history, "notify", f.target, f.kind, done)
            if (warned is None or now - warned >= repeat) and not policy.notifications.holds(now):
                return ProposedAction(action="notify", reason=f.evidence, **base)
            return None
        stopped = _last(history, "terminate", f.target, statuses=done, uid=match)
        refused = _last(history, "terminate", f.target, statuses=("refused",), uid=match)
        if refused is not None and now - refused < repeat:
            return None  # the scheduler said no on purpose (e.g. a PodDisruptionBudget): back off
        if state == "stopping" and stopped is not None:
            if now - stopped >= timedelta(seconds=policy.stop.grace_period):
                return ProposedAction(action="force_terminate", reason=f"ignored SIGTERM; {f.evidence}", **base)
            return None
        # A warning about an earlier stretch of waste (a lull the job worked out of) announces nothing now: warn
        # again, as the guardrail only counts warnings sent since this stretch began (warning_first_rule).
        stale = warned is not None and warned < f.since
        # A warning the steward then tried and failed to send again (a new stretch, a repeat) is superseded: the
        # guardrail no longer counts it, so keep trying to deliver one.
        failed = _last(history, "notify", f.target, f.kind, ("failed",), uid=match)
        stale = stale or (warned is not None and failed is not None and failed > warned)
        # A keep (audited, or a keep-until annotation that has passed) answered the warning before it: after the
        # keep, the owner is warned again (warning_first_rule).
        stale = stale or (warned is not None and kept is not None
                          and all(kept.answers(e) for e in _done(history, "notify", f.target, f.kind, done, match)))
        # In the job's long-tail grace (f.stop_after): one warning per stop, sent no earlier than a repeat period
        # before the stop can land, and no stop before the grace ends (the guardrail's grace_rule too).
        grace_left = (f.stop_after - now) if f.stop_after is not None else timedelta(0)
        if warned is None or now - warned >= repeat or stale:
            if grace_left > repeat or policy.notifications.holds(now):
                return None  # not yet: too early in the grace, or outside the working hours the policy keeps
            return ProposedAction(action="notify", reason=f.evidence, **base)
        if now - warned >= timedelta(seconds=policy.warning.min_notice) and stopped is None and grace_left <= timedelta(0):
            return ProposedAction(action="terminate", reason=f.evidence, **base)
        return None
