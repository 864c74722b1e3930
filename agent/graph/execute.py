"""Carry out one guarded action: re-read fresh state, re-check the guardrail, audit the intent, act, audit. Idempotent."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from agent.detectors.engine import run_detectors
from agent.detectors.keepalive import fleet_idle_of
from agent.detectors.signals import group_signals
from agent.graph.deps import stale_job_metrics
from agent.guardrail.decide import Facts, decide
from agent.planning.policy_model import stop_deadline, warning_message
from core.actions import (
    STOP_ACTIONS,
    STOPPABLE_KINDS,
    UNSURE_STOP,
    ActionOutcome,
    ActionStatus,
    Finding,
    GuardedAction,
    History,
    HistoryEntry,
    ProposedAction,
)
from core.cluster import JobInfo, StopResult, job_gang
from core.durations import format_duration
from core.fencing import acting, acting_here, current_fence, fence_problem, is_this_process, process_gone, this_process
from core.text import markdown_text

log = logging.getLogger("steward.execute")
MODEL_NOTE_CHARS = 500  # a model may add a short note to the product's warning, never replace it
# How far back a sweep looks for actions a stopped process left without an outcome: the guardrail's own memory,
# counted back from the newest intent (the steward's last action), not from now, so that an outage of any length
# leaves every intent of the process that stopped within reach of the next sweep.
INTERRUPTED_LOOKBACK = timedelta(hours=24)
# Longer than any live action takes from its intent to its outcome (a few API calls, each under its request timeout):
# an unsettled intent younger than this, written by a process that may still run, may still be carried out.
LIVE_ACTION = timedelta(minutes=10)
LIVE_RESIZE = LIVE_ACTION


class OutcomeNotRecorded(RuntimeError):
    """An action's outcome could not be written to the audit log (the store locked or full): the action may have
    taken effect, so it is never recorded as failed; its intent is settled from fresh state by a later sweep."""


if TYPE_CHECKING:
    from agent.graph.deps import StewardDeps
    from core.observation import Observation


def _already_executed(deps: StewardDeps, action_id: str, target: str) -> bool:
    return any(
        e.data.get("action_id") == action_id
        for e in deps.audit.entries(kind="execution", target=target, status="executed", limit=200)
    )


def writer_may_be_acting(intent: Any, now: datetime) -> bool:
    """Whether the process that wrote `intent` may still be carrying it out: then no one else settles or redoes it.

    It cannot when it is this process and the action no longer runs here, or a process on this host that has ended
    (host/pid, as approval claims are told apart). Any other writer (on another host; a live process here, such as
    a cron sweep beside the server or a replica whose lease lapsed with its call on the wire) may, until LIVE_ACTION
    after its intent: it makes no new call once it no longer holds the lease (core/fencing.py), and a call already
    on the wire ends within its timeouts. An intent written before intents named their writer is settled as before.
    """
    writer = intent.data.get("writer")
    if not writer:
        return False
    if is_this_process(intent.data.get("process")):
        return acting_here(str(intent.data.get("action_id")))
    if process_gone(str(writer), this_pid_is_another=True):
        return False
    return bool(now - intent.at < LIVE_ACTION)


def _acting_elsewhere(deps: StewardDeps, target: str, now: datetime) -> Any:
    """The newest intent on `target` without an outcome whose writer may still be carrying it out (another steward,
    or another thread here), if any: acting beside it would warn or stop twice."""
    for e in deps.audit.entries(kind="intent", target=target, limit=50):
        if not writer_may_be_acting(e, now):
            continue
        done = deps.audit.entries(kind="execution", target=target, since=e.at, limit=1000)
        if not any(x.data.get("action_id") == e.data.get("action_id") for x in done):
            return e
    return None


def _unsettled_intent(deps: StewardDeps, action_id: str, target: str, now: datetime) -> Any:
    """The intent this action left without an outcome, if any, however old (an answer completed days later, after
    the audit store was down, must not act again); the target's newest intents are looked at."""
    # An intent dated ahead of the clock (written by a replica whose clock runs ahead, or before a step back) may
    # have been carried out all the same: looked at whatever its date.
    for e in deps.audit.entries(kind="intent", target=target, limit=1000):
        if e.data.get("action_id") == action_id:
            done = deps.audit.entries(kind="execution", target=target, since=e.at, limit=1000)
            return None if any(x.data.get("action_id") == action_id for x in done) else e
    return None


def _unsettled_resize(deps: StewardDeps, pool: str, action_id: str, now: datetime) -> Any:
    """The newest earlier resize of `pool` left without an outcome, if any, among those settle_interrupted settles:
    until it is settled from the pool's size, what it did is not known, and another resize would act on a guess
    (and a later settlement would take that one's nodes for its own)."""
    newest = deps.audit.entries(kind="intent", limit=1)
    if not newest:
        return None
    since = min(now, newest[0].at) - INTERRUPTED_LOOKBACK
    for e in deps.audit.entries(kind="intent", target=pool, since=since, limit=50):
        if e.action != "resize_pool" or e.data.get("action_id") == action_id:  # whatever its date
            continue
        if e.run_id and deps.audit.entries(kind="report", run_id=e.run_id, limit=1):
            continue  # its run reached its report: every intent of it has an outcome
        done = deps.audit.entries(kind="execution", target=pool, since=e.at, limit=1000)
        if not any(x.data.get("action_id") == e.data.get("action_id") for x in done):
            return e
    return None


def _pool_history(deps: StewardDeps, at: datetime) -> History:
    """The history the scale-up detector reads executed scale-downs from (and the guardrail decides on)."""
    return deps.audit.history(at, denials_for=deps.policy.approvals.denials_lookback())


def fresh_facts(deps: StewardDeps, run_id: str, target: str, run_findings: list[Finding] | None, *,
                reread_job: bool = True) -> Facts:
    """The facts an action is decided or carried out on (_fresh_facts, without the findings of the target's gang)."""
    return _fresh_facts(deps, run_id, target, run_findings, reread_job=reread_job)[0]


def _fresh_facts(deps: StewardDeps, run_id: str, target: str, run_findings: list[Finding] | None, *,
                 reread_job: bool = True) -> tuple[Facts, list[Finding]]:
    """The facts an action is decided or carried out on.

    Deciding (reread_job=False) uses the sweep's own observation and findings, read moments ago. Acting
    re-reads only the target, on any clock: a job is one scheduler get plus its own window of metrics,
    re-detected (a bounded number of calls, never the whole cluster), in the context a sweep judges it in: a pod
    of a distributed job with the other pods of that job (deps.observe_job; their list failing, nothing is done),
    and the CPU/IO fields and idle power the sweep's reading of the cluster showed; a pool or a node, whose
    findings need the cluster as context, gets a fresh observation of the cluster.

    A job's facts say when the GPU metrics they were read from are stale (Facts.stale_metrics: no sample in the
    newest slice for the job, or a pod of its distributed job, on some node): the guardrail then refuses the action
    (stale_metrics_rule), as a sweep whose every GPU went quiet judges nothing.
    """
    obs = deps.observation(run_id)
    if not reread_job:
        findings = run_findings if run_findings is not None else run_detectors(obs, deps.policy,
                                                                              history=_pool_history(deps, obs.at))
        job = obs.jobs_by_id().get(target)
        gang = _gang(job, obs.jobs)
        return Facts(now=obs.at, job=job, pool=next((p for p in obs.pools if p.name == target), None),
                     findings=[f for f in findings if f.target == target], cluster_gpus=obs.cluster_gpus(),
                     gang=gang, stale_metrics=_stale(obs, job, gang)), findings
    if any(p.name == target for p in obs.pools) or any(n.name == target for n in obs.nodes):
        fresh = deps.fresh_observation(run_id)
        findings = run_findings if (fresh is obs and run_findings is not None) else run_detectors(
            fresh, deps.policy, history=_pool_history(deps, fresh.at))
        is_node = any(n.name == target for n in fresh.nodes) and not any(p.name == target for p in fresh.pools)
        return Facts(now=fresh.at, job=None if is_node else deps.scheduler.get_job(target),
                     pool=next((p for p in fresh.pools if p.name == target), None),
                     findings=[f for f in findings if f.target == target], cluster_gpus=fresh.cluster_gpus()), []
    now = deps.clock.now()
    job = deps.scheduler.get_job(target)
    if job is None:
        return Facts(now=now, job=None, findings=[], cluster_gpus=obs.cluster_gpus()), []
    if run_findings is not None and obs.at == now:
        findings = run_findings  # no time has passed since the sweep's own reading
        gang = _gang(job, obs.jobs)
        stale = _stale(obs, job, gang)
    else:
        alone = deps.observe_job(job, now)
        # One job alone shows no idle GPU: what idle GPUs draw comes from the sweep's reading of the cluster,
        # read once per sweep observation however many actions re-check.
        if not obs.fleet_idle_w:
            obs.fleet_idle_w = fleet_idle_of(obs, deps.policy)
        alone.fleet_idle_w = obs.fleet_idle_w
        # Likewise which CPU/IO fields the source reads: a job whose own series all vanished is unknown in the sweep,
        # and must not be judged on its GPUs alone here.
        alone.io_fields = sorted(group_signals(obs).io_fields)
        findings = run_detectors(alone, deps.policy)
        gang = _gang(job, alone.jobs)
        stale = _stale(alone, job, gang)
    return Facts(now=now, job=job, findings=[f for f in findings if f.target == target],
                 cluster_gpus=obs.cluster_gpus(), gang=gang, stale_metrics=stale), findings


def _stale(obs: Observation, job: JobInfo | None, gang: list[JobInfo]) -> str | None:
    """Why the GPU metrics `job` is judged on in `obs` are stale (its own or its gang's: no sample in the newest
    slice; deps.stale_job_metrics), or None. The guardrail refuses an action on it then (stale_metrics_rule)."""
    if job is None:
        return None
    signals = group_signals(obs)
    gpus = [g for j in (job, *gang) if (series := signals.jobs.get(j.id)) is not None for g in series.gpus]
    return stale_job_metrics(gpus, [job, *gang], obs.at, obs.slice_s)


def _gang(job: JobInfo | None, jobs: list[JobInfo]) -> list[JobInfo]:
    """The other pods of `job`'s distributed job among `jobs` (what the guardrail's protection reads)."""
    group = job_gang(job) if job is not None else None
    if job is None or group is None:
        return []
    return [j for j in jobs if j.id != job.id and job_gang(j) == group]


def execute_action(
    deps: StewardDeps,
    ga: GuardedAction,
    run_id: str,
    *,
    run_findings: list[Finding] | None = None,
    approved_by: str | None = None,
    history: History | None = None,
) -> ActionOutcome:
    """Act on one decision. Pass `history` when acting on several: the caller keeps it current."""
    p = ga.proposal
    now = deps.clock.now()
    uid = p.target_uid
    recorded: list[ActionOutcome] = []

    def outcome(status: ActionStatus, reason: str, detail: str = "", gpus: int = 0,
                deadline: datetime | None = None, removed_nodes: int = 0,
                extra: dict[str, Any] | None = None, at: datetime | None = None) -> ActionOutcome:
        # `at`: when it happened, where that is later than this action's first clock reading (a warning: when the
        # channel accepted it, after the re-read and the send).
        at = at if at is not None else now
        out = ActionOutcome(id=ga.id, action=p.action, target=p.target, level=p.level, status=status, at=at,
                            reason=reason, detail=detail, gpus=gpus,
                            reclaimed_gpu_hours_per_hour=float(gpus) if status == "executed" and p.action != "notify"
                            else 0.0, approved_by=approved_by, target_uid=uid, deadline=deadline)
        try:
            deps.audit.record(
                "execution", at=at, run_id=run_id, target=p.target, action=p.action, level=p.level, status=status,
                reason=reason,
                data={"action_id": ga.id, "finding_kind": p.finding_kind, "gpus": gpus, "detail": detail,
                      "deadline": deadline.isoformat() if deadline else None, "approved_by": approved_by,
                      "target_uid": uid,
                      "proposed_by": p.proposed_by, "target_nodes": p.target_nodes, "removed_nodes": removed_nodes,
                      **(extra or {})},
            )
        except Exception as exc:
            raise OutcomeNotRecorded(f"the outcome of {p.action} {p.target} ({status}) could not be audited: "
                                     f"{exc}") from exc
        recorded.append(out)
        return out

    if _already_executed(deps, ga.id, p.target):
        return ActionOutcome(id=ga.id, action=p.action, target=p.target, level=p.level, status="skipped", at=now,
                             reason="already executed (idempotent)")
    # This very action was started before and its outcome never written (the process died, or the audit store
    # refused the outcome and an approved answer is being completed again): settle it from fresh state, never redo it.
    started = _unsettled_intent(deps, ga.id, p.target, now)
    lost = fence_problem() if started is not None else None
    if started is not None and (lost is not None or writer_may_be_acting(started, now)):
        # Being carried out (a second completion), or to be settled by the steward that holds the lease: this one's
        # outcome would settle the intent, so none is audited.
        why = (f"this steward no longer holds the sweeper lease ({lost})" if lost is not None
               else f"being carried out by {started.data.get('writer')} since {started.at:%H:%M}")
        return ActionOutcome(id=ga.id, action=p.action, target=p.target, level=p.level, status="skipped", at=now,
                             reason=f"not done: {why}")
    if started is not None:
        try:
            effect, detail, done_gpus, removed, record = _interrupted_effect(deps, started)
        except Exception as exc:  # cannot re-read state: do not act blind
            return outcome("failed", f"could not re-read fresh state: {exc}")
        return outcome(effect, f"interrupted at {started.at:%H:%M} before its outcome was recorded: {detail}", detail,
                       gpus=done_gpus, removed_nodes=removed, extra=record)
    covered = _covered_stop(deps, p, uid)
    if covered is not None:
        # Stopped already, with a sibling, by the one suspension of the owner they share: never asked again.
        return outcome("skipped", f"already stopped with {covered.data.get('covered_by')} at {covered.at:%H:%M} by "
                       f"one suspension of the owner they share (uid {covered.data.get('owner_uid')}); not asked again")
    try:
        facts, gang_findings = _fresh_facts(deps, run_id, p.target, run_findings)
        if history is None:
            history = deps.audit.history(now, denials_for=deps.policy.approvals.denials_lookback())
        else:
            # The owner's keep is part of the target's fresh state: one given while this sweep ran (ChatOps and the
            # API grant keeps without waiting for a sweep) holds for this very action, as its reply said it would.
            history.exemptions = deps.audit.exemptions_in_force(now)
    except Exception as exc:  # cannot re-read state: do not act blind
        return outcome("failed", f"could not re-read fresh state: {exc}")
    if facts.job is not None and not uid:
        uid = facts.job.uid or None
    decision = decide(p, facts, deps.policy, history, approved=approved_by is not None,
                      asked_at=ga.decided_at if approved_by is not None else None)
    # A warning (it announces a stop) states its deadline, the one its text gives (the notice, or the end of the
    # job's long-tail grace when later); advice (over-provisioned, node health) has none.
    warned_about = next((f for f in facts.findings if f.kind == p.finding_kind), None)
    warning_deadline = (stop_deadline(warned_about, deps.policy, now)
                        if p.action == "notify" and p.finding_kind in STOPPABLE_KINDS else None)
    if decision.verdict != "allow":
        return outcome("blocked", f"re-checked before acting: {decision.reason}")
    if decision.dry_run:
        return outcome("dry_run", f"dry run: would {p.action} {p.target}", deadline=warning_deadline)
    elsewhere = _acting_elsewhere(deps, p.target, now)
    if elsewhere is not None:
        return outcome("skipped", f"not done: {elsewhere.data.get('writer')} has been carrying out "
                       f"{elsewhere.action} on {p.target} since {elsewhere.at:%H:%M} and has recorded no outcome yet; "
                       "acting beside it would act twice", "not done: another steward is carrying it out")
    earlier = _unsettled_resize(deps, p.target, ga.id, now) if p.action == "resize_pool" else None
    if earlier is not None:
        return outcome("skipped", f"not done: the resize of pool {p.target} to {earlier.data.get('target_nodes')} "
                       f"nodes at {earlier.at:%H:%M} has no outcome yet (it may have taken effect, whole or in part); "
                       "it is settled from the pool's fresh size first", "not done: an earlier resize is not settled")
    plan = planned_scale_up(facts.findings) if p.action == "resize_pool" else {}
    # The other pods of its distributed job whose own stop is due now too: their shared owner may be suspended once.
    due = (_due_siblings(deps, p, facts, gang_findings, history, uid, now)
           if p.action == "terminate" and facts.gang and getattr(deps.scheduler, "stops_through_owners", False)
           else None)
    with acting(ga.id):
        return _act(deps, ga, run_id, facts, uid, warning_deadline, now, outcome, recorded, approved_by, plan,
                    due=due, history=history, gang_findings=gang_findings)


def _covered_stop(deps: StewardDeps, p: ProposedAction, uid: str | None) -> Any:
    """The executed stop of this very pod (its uid) that a sibling's stop recorded, having suspended the owner they
    share (_record_covered), if any: the pod's own stop is then done."""
    if p.action != "terminate" or not uid:
        return None
    return next((e for e in deps.audit.entries(kind="execution", target=p.target, status="executed", limit=200)
                 if e.action == "terminate" and e.data.get("covered_by") and e.data.get("target_uid") == uid), None)


def _due_siblings(deps: StewardDeps, p: ProposedAction, facts: Facts, findings: list[Finding], history: History,
                  uid: str | None, now: datetime) -> dict[str, str]:
    """The other pods of the target's distributed job (id -> uid) whose own graceful stop, for the same reason, the
    guardrail lets through now without a person: each re-read with the job (its findings come from the same re-read
    of the gang, deps.observe_job), warned and past its deadline, not kept nor protected, within the limits counted
    as if the stops before it in this list were done. A stop through the pods' shared owner is asked only when every
    pod the owner runs is here (KubernetesScheduler.stop_job's `siblings`); a sibling left out keeps the pod's stop
    to itself."""
    job = facts.job
    if job is None:
        return {}
    trial = history.model_copy(update={"entries": [*history.entries, HistoryEntry(
        action="terminate", target=p.target, status="executed", at=now, finding_kind=p.finding_kind, gpus=job.gpus,
        target_uid=uid)]})
    due: dict[str, str] = {}
    for other in facts.gang:
        if not other.uid or other.state != "running":
            continue
        mine = ProposedAction(action="terminate", target=other.id, reason=p.reason, finding_kind=p.finding_kind,
                              proposed_by=p.proposed_by, target_uid=other.uid)
        seen = Facts(now=facts.now, job=other, findings=[f for f in findings if f.target == other.id],
                     cluster_gpus=facts.cluster_gpus, gang=[job, *(o for o in facts.gang if o.id != other.id)],
                     stale_metrics=facts.stale_metrics)  # the same re-read of the gang: as fresh as the target's
        decision = decide(mine, seen, deps.policy, trial)
        if decision.verdict != "allow" or decision.dry_run:
            continue
        due[other.id] = other.uid
        trial.entries.append(HistoryEntry(action="terminate", target=other.id, status="executed", at=now,
                                          finding_kind=p.finding_kind, gpus=other.gpus, target_uid=other.uid))
    return due


def _record_covered(deps: StewardDeps, ga: GuardedAction, run_id: str, facts: Facts, result: StopResult,
                    due: dict[str, str], history: History | None, findings: list[Finding], now: datetime) -> None:
    """Each sibling pod a stop stopped with its own, through one suspension of the owner they share: its stop is
    recorded as done (executed, its GPUs reclaimed, its owner's credit), once, keyed on the pod's uid and naming the
    owner's, so that its own stop, in this sweep or after a restart, is not asked again (_covered_stop)."""
    p = ga.proposal
    siblings = {j.id: j for j in facts.gang}
    for pod_id in result.covered:
        other = siblings.get(pod_id)
        if other is None or due.get(pod_id) != other.uid:
            continue
        detail = f"{result.status}: {result.detail}"
        deps.audit.record(
            "execution", at=now, run_id=run_id, target=pod_id, action="terminate", level=p.level, status="executed",
            reason=f"stopped with {p.target} by one suspension of the owner they share: its own stop was due now",
            data={"action_id": f"{ga.id}:with:{pod_id}", "finding_kind": p.finding_kind, "gpus": other.gpus,
                  "detail": detail, "deadline": None, "approved_by": None, "target_uid": other.uid,
                  "proposed_by": p.proposed_by, "target_nodes": None, "removed_nodes": 0, "covered_by": p.target,
                  "owner_uid": result.owner_uid})
        if history is not None:
            history.entries.append(HistoryEntry(action="terminate", target=pod_id, status="executed", at=now,
                                                finding_kind=p.finding_kind, gpus=other.gpus,
                                                target_uid=other.uid, detail=detail))
        try:
            record_credit(deps, run_id, other, p.model_copy(update={"target": pod_id, "target_uid": other.uid}),
                          [f for f in findings if f.target == pod_id], now)
        except Exception:  # the stop is done and audited; a lost credit is not a failed stop
            log.exception("could not record the owner's credit for stopping %s", pod_id)


def _act(deps: StewardDeps, ga: GuardedAction, run_id: str, facts: Facts, uid: str | None,
         warning_deadline: datetime | None, now: datetime, outcome: Callable[..., ActionOutcome],
         recorded: list[ActionOutcome], approved_by: str | None, plan: dict[str, Any], *,
         due: dict[str, str] | None = None, history: History | None = None,
         gang_findings: list[Finding] | None = None) -> ActionOutcome:
    """Write the intent, then make the call, unless the sweep no longer holds the sweeper lease. `plan`: a
    resize's planned scale-up back (planned_scale_up), in its intent, so that an interrupted resize keeps it too,
    and in its outcome. `due`: a stop's siblings whose own stop is due too (_due_siblings; None: not asked)."""
    p = ga.proposal
    job = facts.job
    gpus = job.gpus if job else 0
    fence = current_fence()
    # Written ahead of the call: if the process dies before the outcome below is audited, the next sweep finds
    # this intent without an outcome and settles it from fresh state (settle_interrupted), never acts twice. It
    # names its writer, so that no one settles it while the writer may still be carrying it out.
    deps.audit.record("intent", at=now, run_id=run_id, target=p.target, action=p.action, level=p.level,
                      status="acting", reason=f"about to {p.action} {p.target}",
                      data={"action_id": ga.id, "finding_kind": p.finding_kind, "gpus": gpus, "target_uid": uid,
                            "proposed_by": p.proposed_by, "target_nodes": p.target_nodes, "approved_by": approved_by,
                            "nodes_before": facts.pool.nodes if facts.pool else None, **plan, **this_process(),
                            "lease_holder": fence.holder if fence is not None else None,
                            # Its siblings due with it (id -> uid, and their GPUs): a stop interrupted after the
                            # owner's suspension records theirs too when settled (settle_interrupted).
                            **({"siblings": due, "sibling_gpus": {j.id: j.gpus for j in facts.gang if j.id in due}}
                               if due else {})})
    # Fencing, just before the call: a sweep that no longer holds the sweeper lease makes none (another steward
    # sweeps now, and would act beside it).
    lost = fence_problem()
    if lost is not None:
        log.warning("not acting on %s: %s", p.target, lost)
        return outcome("skipped", f"not done: this steward no longer holds the sweeper lease ({lost}); the steward "
                       "that holds it sweeps and acts instead", "not done: this steward lost the sweeper lease")
    try:
        if p.action == "notify":
            finding = next((f for f in facts.findings if f.kind == p.finding_kind), facts.findings[0])
            # A warning starts a promise to a person: its time and deadline are taken when it leaves, after the
            # re-read of the job (a slow metrics store) and whatever came before, never from when the work began.
            now = deps.clock.now()
            if warning_deadline is not None:
                warning_deadline = stop_deadline(next((f for f in facts.findings if f.kind == p.finding_kind), None),
                                                 deps.policy, now)
            # The text is the product's template (deadline, evidence, how to keep the job); a model adds a note.
            # How this backend's stop is done and undone (a Job suspended, a notebook stopped as Kubeflow's culler
            # does), or why a stop would not free the GPUs: said with the stop it announces.
            how = getattr(deps.scheduler, "stop_note", None)
            note = how(job, deps.language) if how is not None and job is not None else ""
            body = warning_message(finding, deps.policy, now, deps.language, stop_note=note)
            if p.message and p.proposed_by != "policy-model" and p.message.strip() != body.strip():
                note = markdown_text(" ".join(p.message.split())[:MODEL_NOTE_CHARS])  # text, not markup
                body += ("\n\n助手备注：" if deps.language == "zh" else "\n\nNote from the assistant: ") + note
            recipient = job.user if job else "platform-oncall"
            # Working hours are the policy's, whatever the channel (e-mail, Kubernetes events, chat): a deferred
            # warning is not given, so no notice runs and no stop follows until it goes out when they begin.
            rules = deps.policy.notifications
            if rules.holds(now):
                days = ", weekdays" if rules.weekdays_only else ""
                hours = f"outside working hours ({rules.working_hours} {rules.timezone}{days})"
                return outcome("skipped", f"deferred: {hours}; {p.reason or 'a warning'}", f"deferred: {hours}")
            # A Slurm user knows the job by its number (squeue, the output file), not by partition/name.
            number = (job.labels.get("slurm.array_task") or job.labels.get("slurm.job_id")) if job else None
            if deps.language == "zh":
                subject = f"GPU Steward：{p.target}" + (f"（Slurm 作业 {number}）" if number else "")
            else:
                subject = f"GPU Steward: {p.target}" + (f" (Slurm job {number})" if number else "")
            sent = deps.notifier.notify(recipient, subject, body, job_id=p.target, deadline=warning_deadline,
                                        target_uid=(job.uid or None) if job else None)
            # Recorded as given when the channel accepted it (a slow SMTP server, a webhook's retries): its notice runs
            # from then, and the deadline on record is never earlier than a full notice after it.
            accepted = max(now, deps.clock.now())
            if warning_deadline is not None:
                warning_deadline = max(warning_deadline, accepted + timedelta(seconds=deps.policy.warning.min_notice))
            # Suppressed (duplicate) or deferred (after hours) is not a warning given, nor a backend failure.
            sent_as: dict[str, ActionStatus] = {"sent": "executed", "suppressed": "skipped", "deferred": "skipped"}
            status: ActionStatus = sent_as.get(sent.status, "failed")
            detail = f"{sent.channel} to {recipient}: {sent.status}" + (f" ({sent.detail})" if sent.detail else "")
            return outcome(status, p.reason or "warned owner", detail,
                           deadline=warning_deadline if status == "executed" else None, at=accepted)
        if p.action in ("terminate", "force_terminate"):
            force = p.action == "force_terminate"
            extra: dict[str, Any] = {"siblings": due} if due is not None and not force else {}
            result = deps.scheduler.stop_job(p.target, force=force, grace_s=deps.policy.stop.grace_period,
                                             reason=p.reason, uid=uid, **extra)
            mapping: dict[str, ActionStatus] = {"stopped": "executed", "stopping": "executed",
                                                "already_gone": "skipped", "refused": "refused", "error": "failed"}
            status = mapping[result.status]
            covers = {"covers": result.covered, "owner_uid": result.owner_uid} if result.covered else {}
            out = outcome(status, p.reason, f"{result.status}: {result.detail}".strip(": "),
                          gpus=gpus if status == "executed" else 0, extra=covers)
            if status == "executed" and result.covered:
                _record_covered(deps, ga, run_id, facts, result, due or {}, history, gang_findings or [], now)
            if status == "executed" and job is not None:
                try:
                    record_credit(deps, run_id, job, p, facts.findings, now)
                except Exception:  # the stop is done and audited; a lost credit is not a failed stop
                    log.exception("could not record the owner's credit for stopping %s", p.target)
            return out
        if p.action == "resize_pool":
            assert p.target_nodes is not None
            resized = deps.pools.resize_pool(p.target, p.target_nodes, reason=p.reason)
            freed = (resized.nodes_before - resized.nodes_after) * (facts.pool.gpus_per_node if facts.pool else 0)
            status = {"resized": "executed", "unchanged": "skipped", "refused": "refused"}.get(resized.status, "failed")  # type: ignore[assignment]
            # A resize that failed part way moved the pool: executed in part, so its plan back stays open
            # (open_scale_down), as when the process is killed at the same point (_interrupted_resize).
            moved = (resized.nodes_after - resized.nodes_before) * (p.target_nodes - resized.nodes_before) > 0
            part = ""
            if status == "failed" and moved:
                status = "executed"
                part = (f"took effect in part ({resized.nodes_before}->{resized.nodes_after} of "
                        f"{resized.nodes_before}->{p.target_nodes}): ")
            return outcome(status, p.reason,
                           f"{part}{resized.nodes_before}->{resized.nodes_after} {resized.detail}".strip(),
                           gpus=max(0, freed), removed_nodes=max(0, resized.nodes_before - resized.nodes_after),
                           extra={"nodes_before": resized.nodes_before, "nodes_after": resized.nodes_after, **plan,
                                  "added_gpus": max(0, resized.nodes_after - resized.nodes_before)
                                  * (facts.pool.gpus_per_node if facts.pool else 0)})
        if p.action == "cordon":
            cordon = getattr(deps.scheduler, "cordon_node", None)
            if cordon is None:
                return outcome("failed", p.reason, f"the {type(deps.scheduler).__name__} backend cannot cordon nodes")
            done = cordon(p.target, uid=uid)
            status = {"cordoned": "executed", "unchanged": "skipped", "refused": "refused"}.get(done.status, "failed")  # type: ignore[assignment]
            return outcome(status, p.reason, f"{done.status}: {done.detail}".strip(": "))
    except OutcomeNotRecorded:
        # The call was made (or refused) but its outcome is not in the audit: not a backend failure. The intent
        # stays without an outcome, and the next sweep settles it from fresh state (settle_interrupted).
        raise
    except Exception as exc:  # the backend failed: audited as failed, counts toward the circuit breaker
        if recorded:
            raise  # after the outcome was audited: that outcome stands
        return outcome("failed", f"{p.action} failed: {type(exc).__name__}: {exc}")
    return outcome("failed", f"unknown action {p.action}")


def planned_scale_up(findings: list[Finding]) -> dict[str, Any]:
    """A forecast scale-down's planned scale-up back (when, to how many nodes), from its oversized finding; {} when
    the resize planned none. Kept in the execution's audit data, where the scale-up detector reads it back."""
    f = next((f for f in findings if f.kind == "oversized" and "scale_up_at" in f.metrics), None)
    if f is None:
        return {}
    return {"scale_up_at": datetime.fromtimestamp(f.metrics["scale_up_at"], UTC).isoformat(),
            "scale_up_nodes": int(f.metrics["scale_up_nodes"])}


def record_credit(deps: StewardDeps, run_id: str, job: JobInfo, p: ProposedAction, findings: list[Finding],
                  now: datetime) -> None:
    """A resource credit for the owner of a job the steward stopped (policy `credit`): audited once per stop.

    Recorded only; the scheduler-side grant (a priority bump, a quota grace) is the operators' to apply.
    """
    rule = deps.policy.credit
    if rule.kind == "none" or job.gpus <= 0:
        return
    uid = job.uid or None
    for e in deps.audit.entries(kind="credit", target=p.target, limit=200):
        if e.data.get("target_uid") == uid:
            return  # a forced stop after a graceful one is the same stop: one credit
    finding = next((f for f in findings if f.kind == p.finding_kind), None)
    hours = rule.valid_for / 3600.0
    grants = (f"priority +{rule.priority_bump}" if rule.kind == "priority"
              else f"quota grace of {job.gpus} GPUs")
    deps.audit.record(
        "credit", at=now, run_id=run_id, target=p.target, action=p.action, status="granted",
        reason=f"{grants} for {format_duration(rule.valid_for)} to {job.user}: {job.gpus} GPUs reclaimed from "
               f"{p.target}",
        data={"owner": job.user, "project": job.project, "kind": rule.kind, "gpus": job.gpus,
              "gpu_hours": round(job.gpus * hours, 2), "priority_bump": rule.priority_bump if rule.kind == "priority"
              else None, "until": (now + timedelta(seconds=rule.valid_for)).isoformat(), "target_uid": uid,
              "finding_kind": p.finding_kind,
              "idle_gpu_hours": finding.waste_gpu_hours if finding is not None else None},
    )


def remember_outcome(history: History, outcome: ActionOutcome, finding_kind: str | None) -> None:
    """Add an outcome to a history being used for later decisions in the same step."""
    history.entries.append(HistoryEntry(action=outcome.action, target=outcome.target, status=outcome.status,
                                        at=outcome.at, finding_kind=finding_kind, gpus=outcome.gpus,  # type: ignore[arg-type]
                                        target_uid=outcome.target_uid, deadline=outcome.deadline,
                                        detail=outcome.detail))


def settle_interrupted(deps: StewardDeps, run_id: str) -> list[ActionOutcome]:
    """Give every action a stopped process left between its intent and its outcome an audited outcome.

    Decided from fresh state, never by acting again: a graceful stop whose job is now stopping, or a stop whose job
    (that uid) is gone, took effect (executed: it counts toward the limits); a job still running (for a forced
    stop, still stopping), or a warning whose delivery is unknown, is `skipped` (not counted as done), so it is
    redone once if still warranted. A target that cannot be read now is left for the next sweep. It looks back
    INTERRUPTED_LOOKBACK from the newest intent, so an intent is settled however long the steward was down.

    Only an intent whose writer cannot still be carrying it out is settled (writer_may_be_acting): a run without a
    report is not proof that its process stopped (it may be a sweep that outlived its lease, with its call on the
    wire). A sweep that no longer holds the sweeper lease settles nothing.
    """
    if fence_problem() is not None:
        return []
    now = deps.clock.now()
    # A process that stops writes no intent after it; its own are no older than its last one, however long the
    # steward stays down (a weekend, a crash loop) before the next sweep.
    newest = deps.audit.entries(kind="intent", limit=1)
    if not newest:
        return []
    since = min(now, newest[0].at) - INTERRUPTED_LOOKBACK
    intents = deps.audit.entries(kind="intent", since=since, limit=10_000, newest_first=False)
    if not intents:
        return []
    # A run that reached its report gave each of its intents an outcome; only the others are looked at closely.
    finished = {e.run_id for e in deps.audit.entries(kind="report", since=min(e.at for e in intents), limit=100_000)}
    settled: set[str] = set()
    out = []
    for intent in intents:
        action_id = str(intent.data.get("action_id"))
        # An intent dated ahead of this clock is settled too (its writer's clock ran ahead, or this one stepped
        # back): it may have taken effect all the same. For the age checks it is young (writer_may_be_acting).
        if intent.run_id in finished or action_id in settled or writer_may_be_acting(intent, now):
            continue
        if any(e.data.get("action_id") == action_id
               for e in deps.audit.entries(kind="execution", target=intent.target, since=intent.at, limit=1000)):
            continue
        try:
            status, detail, gpus, removed, record = _interrupted_effect(deps, intent)
        except Exception:  # the backend is down too: settled by a later sweep, when it can be read
            continue
        reason = f"interrupted at {intent.at:%H:%M} before its outcome was recorded: {detail}"
        data = {"action_id": intent.data.get("action_id"), "finding_kind": intent.data.get("finding_kind"),
                "gpus": gpus, "detail": detail, "deadline": None, "approved_by": intent.data.get("approved_by"),
                "target_uid": intent.data.get("target_uid"), "proposed_by": intent.data.get("proposed_by"),
                "target_nodes": intent.data.get("target_nodes"), "removed_nodes": removed,
                "interrupted_run": intent.run_id, **record}
        # Dated no earlier than its intent: an outcome is looked for from its intent's time on, so one dated before
        # it (this clock behind the intent's writer) was never found and the action settled again at every sweep.
        at = max(now, intent.at)
        deps.audit.record("execution", at=at, run_id=run_id, target=intent.target, action=intent.action,
                          level=intent.level, status=status, reason=reason, data=data)
        if status == "executed" and intent.action == "terminate" and intent.data.get("siblings"):
            _settle_covered(deps, run_id, intent, at)
        settled.add(action_id)
        out.append(ActionOutcome(id=action_id, action=intent.action,  # type: ignore[arg-type]
                                 target=intent.target or "", level=intent.level or 0, status=status, at=at,
                                 reason=reason, detail=detail, gpus=gpus,
                                 reclaimed_gpu_hours_per_hour=float(gpus), approved_by=intent.data.get("approved_by"),
                                 target_uid=intent.data.get("target_uid")))
    return out


def _settle_covered(deps: StewardDeps, run_id: str, intent: Any, at: datetime) -> None:
    """The siblings an interrupted stop named as due with it (its owner suspended once for all): each that is gone
    or stopping since (that uid) gets its executed stop on record, as _record_covered gives it, once; one still
    running is left to its own stop."""
    siblings: dict[str, str] = intent.data.get("siblings") or {}
    gpus: dict[str, int] = intent.data.get("sibling_gpus") or {}
    listed = {j.uid: j for j in deps.scheduler.list_jobs() if j.uid}
    for pod_id, uid in siblings.items():
        job = listed.get(uid)
        if job is not None and job.state != "stopping":
            continue
        if any(e.data.get("target_uid") == uid and e.action == "terminate"
               for e in deps.audit.entries(kind="execution", target=pod_id, status="executed", since=intent.at,
                                           limit=200)):
            continue
        deps.audit.record(
            "execution", at=at, run_id=run_id, target=pod_id, action="terminate", level=intent.level,
            status="executed", reason=(f"interrupted at {intent.at:%H:%M} before its outcome was recorded: stopped "
                                       f"with {intent.target} by one suspension of the owner they share"),
            data={"action_id": f"{intent.data.get('action_id')}:with:{pod_id}",
                  "finding_kind": intent.data.get("finding_kind"), "gpus": int(gpus.get(pod_id) or 0),
                  "detail": "gone" if job is None else "stopping", "deadline": None,
                  "approved_by": intent.data.get("approved_by"), "target_uid": uid,
                  "proposed_by": intent.data.get("proposed_by"), "target_nodes": None, "removed_nodes": 0,
                  "covered_by": intent.target, "interrupted_run": intent.run_id})


def _interrupted_effect(deps: StewardDeps, intent: Any) -> tuple[ActionStatus, str, int, int, dict[str, Any]]:
    """(status, detail, gpus reclaimed, nodes removed, what a resize records besides) of an interrupted action, read
    from the cluster now."""
    action, target, uid = intent.action, intent.target or "", intent.data.get("target_uid")
    if action == "notify":
        return ("skipped", "whether the warning was delivered is unknown, so it does not count as one; "
                "the owner is warned again if the job is still wasting", 0, 0, {})
    if action == "resize_pool":
        return _interrupted_resize(deps, intent)
    if action == "cordon":  # idempotent: redone if still proposed and approved
        return "skipped", f"whether node {target} was cordoned is unknown; a cordon is safe to ask again", 0, 0, {}
    job = deps.scheduler.get_job(target)
    if uid and (job is None or job.uid != uid):
        # Settled by identity, never by name: a Slurm job's id changes when a namesake is submitted (gpu/lone becomes
        # gpu/lone-7), so the job the stop was for may be listed under another name, unsignalled.
        named = job
        job = next((j for j in deps.scheduler.list_jobs() if j.uid == uid), None)
        if job is None and named is not None:
            job = named  # still gone: `named` is another job under that name (said below)
    if job is None or (uid and job.uid != uid):  # a stop (every other action is settled above)
        # The job the stop was for is gone since its intent (no listed job has its uid): most likely the stop did
        # it. Taken as done, so that it counts toward the rate limit, the circuit breaker and the savings, as a stop
        # that may have happened must.
        gone = "the job is gone" if job is None else f"the job (uid {uid}) is gone; {target} is another job now " \
            f"(uid {job.uid}), which nothing was done to"
        return "executed", (f"{gone} since the {action} was sent (or about to be): it is taken to have taken effect "
                            "and counts as a stop; not sent again"), int(intent.data.get("gpus") or 0), 0, {}
    if action == "terminate" and job.state == "stopping":  # a forced stop is for jobs that were stopping already
        return "executed", f"the job is stopping: the {action} took effect", int(intent.data.get("gpus") or 0), 0, {}
    if job.state == "cancelled":  # what a stop leaves (Slurm's scancel): taken as done, like a job that is gone
        return "executed", (f"the job is cancelled since the {action} was sent (or about to be): it is taken to "
                            "have taken effect and counts as a stop; not sent again"), int(intent.data.get("gpus") or 0), 0, {}
    if action in STOP_ACTIONS and job.state in ("completed", "failed"):
        return "skipped", f"the job is {job.state}; nothing more to do", 0, 0, {}
    if action == "terminate" and job.scheduler == "slurm" and job.state == "running":
        # squeue shows no sign of a SIGTERM: a job checkpointing on it, or ignoring it, reads as running.
        return "skipped", (f"{UNSURE_STOP}: Slurm lists a signalled job as running, so the SIGTERM may have been "
                           "sent; it is not sent again before the grace period has passed"), 0, 0, {}
    return "skipped", f"the job is still {job.state}: the {action} did not take effect; redone if still warranted", 0, 0, {}


def _interrupted_resize(deps: StewardDeps, intent: Any) -> tuple[ActionStatus, str, int, int, dict[str, Any]]:
    """An interrupted resize, recorded from what changed: the pool's size now against its size before (a shrink
    killed between two terminate calls removed some nodes, not all), never from "the pool has the size asked for"
    alone (someone else may have brought it there). Whatever it did carries its plan (the scale-up back)."""
    target = intent.target or ""
    pool = next((p for p in deps.pools.list_pools() if p.name == target), None)
    wanted, before = intent.data.get("target_nodes"), intent.data.get("nodes_before")
    reached = pool is not None and wanted is not None and pool.nodes == wanted
    if not reached and deps.clock.now() - intent.at < LIVE_RESIZE:
        # Young enough to be another process's shrink between its marks and its scale call (an approval carried
        # out on a second replica), or between two of its terminate calls: taking its marks back now would let
        # Cluster API pick any machine. Left for a later sweep.
        raise RuntimeError("a resize intent this young may still be running elsewhere")
    marks = ""
    if not reached:
        # A shrink that stopped after marking nodes for removal (Cluster API's delete-machine) leaves the marks to
        # the next scale-down, whoever makes it, and to whatever job has landed there since: take them back. A
        # failure raises, and the intent is settled by a later sweep, when the marks can be taken back.
        release = getattr(deps.pools, "release_marks", None)
        if callable(release) and (lost := fence_problem()) is not None:  # a call that acts: fenced too
            raise RuntimeError(f"marks not taken back: this steward no longer holds the sweeper lease ({lost})")
        released = release(target) if callable(release) else []
        marks = f"; its marks for removal taken off {', '.join(released)}" if released else ""
    if pool is None:
        return "skipped", f"pool {target} has no nodes, not {wanted}: the resize did not take effect{marks}", 0, 0, {}
    was = int(before) if before is not None else (pool.nodes if reached else None)  # an intent without its size
    # What moved toward the size asked for, and no further: a pool someone else moved on since is theirs (its
    # planned scale-up then no longer applies).
    toward = wanted if wanted is not None else pool.nodes
    if was is None or toward == was:
        after = pool.nodes
    else:
        after = min(was, max(pool.nodes, toward)) if toward < was else max(was, min(pool.nodes, toward))
    base = was if was is not None else after
    removed, added = max(0, base - after), max(0, after - base)
    if not (reached or removed or added):
        return "skipped", (f"pool {target} has {pool.nodes} nodes, not {wanted}: the resize did not take "
                           f"effect{marks}"), 0, 0, {"nodes_before": was, "nodes_after": pool.nodes}
    plan = {k: intent.data[k] for k in ("scale_up_at", "scale_up_nodes") if intent.data.get(k) is not None}
    how = ("the resize took effect" if after == toward else
           f"the resize took effect in part ({was}->{after} of {was}->{wanted})")
    return "executed", f"pool {target} has {pool.nodes} nodes now, {was} before: {how}{marks}", \
        removed * pool.gpus_per_node, removed, {"nodes_before": was, "nodes_after": after,
                                                "added_gpus": added * pool.gpus_per_node, **plan}
