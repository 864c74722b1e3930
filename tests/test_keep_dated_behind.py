"""A keep answers every warning recorded before it in the audit log, whatever the clock of the replica that recorded
it. The sweeping replica warns at 10:00:00; the owner answers "keep 30m" a minute later in chat, and the webhook lands
on a replica whose clock is 90 s behind: the keep is dated 09:59:30, after the warning in the log (its seq). Read by
time, the warning looked newer than the keep: once the keep lapsed, the stop landed on the warning it had answered,
with no new warning. The same with a keep and a warning of the same timestamp."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from agent.chatops.commands import KeepRequest, grant_keep
from agent.config.policy import Policy
from agent.guardrail.decide import Facts, decide
from agent.guardrail.protection import keep_answered_at
from agent.planning.policy_model import PolicyModel
from agent.records.audit import AuditLog
from core.actions import Finding, ProposedAction
from core.cluster import JobInfo
from tests.records_world import JOB as STUBBORN
from tests.records_world import Steward
from tests.skewed_world import Skewed

T = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
JOB = JobInfo(id="ml/nb", uid="uid-nb", scheduler="kubernetes", namespace="ml", name="nb", user="alice", gpus=2,
              state="running", started_at=T - timedelta(hours=8))
POLICY = Policy()


def _warn(audit: AuditLog, at: datetime) -> int:
    return audit.record("execution", at=at, run_id="r1", target=JOB.id, action="notify", level=1, status="executed",
                        reason="warned", data={"action_id": f"a{at:%H%M%S}", "finding_kind": "idle",
                                               "target_uid": JOB.uid, "deadline": (at + timedelta(hours=1)).isoformat()})


def _keep(audit: AuditLog, at: datetime, minutes: int = 30) -> int:
    return audit.record("exemption", at=at, run_id="chat", target=JOB.id, status="granted", reason="keep",
                        data={"until": (at + timedelta(minutes=minutes)).isoformat(), "by": "alice",
                              "target_uid": JOB.uid})


def _decide(audit: AuditLog, action: str, now: datetime):
    idle = [Finding(kind="idle", target=JOB.id, since=T - timedelta(hours=6), detected_at=now, evidence="0%")]
    history = audit.history(now, denials_for=POLICY.approvals.denials_lookback())
    proposal = ProposedAction(action=action, target=JOB.id, finding_kind="idle", target_uid=JOB.uid)  # type: ignore[arg-type]
    return decide(proposal, Facts(now=now, job=JOB, findings=idle), POLICY, history), history, idle


def test_a_keep_recorded_after_the_warning_answers_it_whatever_the_recording_replicas_clock():
    audit = AuditLog(":memory:")
    _warn(audit, T)
    _keep(audit, T + timedelta(minutes=1) - timedelta(seconds=90))  # replica B's clock: dated 09:59:30
    now = T + timedelta(hours=1, minutes=1)  # the keep lapsed at 10:29:30; the warning's deadline was 11:00
    stop, history, idle = _decide(audit, "terminate", now)
    assert (stop.verdict, stop.rule) == ("deny", "warning_first"), (
        f"the owner kept the job after the 10:00 warning (audit seq after it); after the keep lapsed the stop landed "
        f"on that warning: {stop.verdict}/{stop.rule}: {stop.reason}")
    # The owner is warned again (not a duplicate of the answered warning), and the planner asks for it.
    warn, _, _ = _decide(audit, "notify", now)
    assert warn.verdict == "allow", warn
    step = PolicyModel._next_step(idle[0], "running", history, POLICY, now, JOB.uid,
                                  keep_answered_at(history, JOB, JOB.id, JOB.uid, now))
    assert step is not None and step.action == "notify", step
    # That new warning, with its full notice run, licenses the stop.
    _warn(audit, now)
    assert _decide(audit, "terminate", now + timedelta(minutes=30))[0].rule == "warning_first"
    assert _decide(audit, "terminate", now + timedelta(hours=1))[0].verdict == "allow"


def test_a_keep_of_the_same_timestamp_as_the_warning_it_answered_answers_it():
    audit = AuditLog(":memory:")
    _warn(audit, T)
    _keep(audit, T)  # the same instant (a coarse or stepped clock), recorded after the warning
    stop, _, _ = _decide(audit, "terminate", T + timedelta(hours=1, minutes=1))
    assert (stop.verdict, stop.rule) == ("deny", "warning_first"), stop
    # A warning recorded after a keep of its own timestamp is a new warning: it counts.
    other = AuditLog(":memory:")
    _keep(other, T - timedelta(minutes=40))
    _warn(other, T)
    assert _decide(other, "terminate", T + timedelta(hours=1, minutes=1))[0].verdict == "allow"


def test_a_keep_dated_ahead_still_answers_the_warnings_dated_before_it():
    """The other way round (last round's fix): a warning recorded after a keep dated ahead of it is still answered
    by the keep's time: the stop needs a warning dated after the keep."""
    audit = AuditLog(":memory:")
    _keep(audit, T + timedelta(minutes=5), minutes=1)  # recorded first, dated ahead
    _warn(audit, T + timedelta(minutes=2))
    stop, _, _ = _decide(audit, "terminate", T + timedelta(hours=1, minutes=3))
    assert (stop.verdict, stop.rule) == ("deny", "warning_first"), stop


def _executed(deps, action: str):
    return [e for e in deps.audit.entries(kind="execution", target=STUBBORN, status="executed", limit=500,
                                          newest_first=False) if e.action == action]


def test_a_keep_from_a_replica_behind_is_followed_by_a_new_warning_and_its_full_notice(tmp_path):
    """End to end: the owner keeps the job from chat a minute after the warning, through a replica 90 s behind;
    the sweeper warns again after the keep lapses, and stops no earlier than that warning's notice."""
    steward = Steward(tmp_path)
    cluster, deps = steward.cluster, steward.deps
    while not _executed(deps, "notify"):
        steward.sweep(5)
    [warning] = _executed(deps, "notify")
    cluster.advance_to(cluster.offset_s + 60)
    behind = dataclasses.replace(deps, clock=Skewed(cluster, -timedelta(seconds=90)))
    reply = grant_keep(behind, KeepRequest(seconds=1800, duration="30m", job=STUBBORN, words=["one more plot"]),
                       user="bob", approver=False, by="chatops:bob", run_id="chat", lang="en")
    assert reply.startswith("OK"), reply
    [keep] = deps.audit.entries(kind="exemption", status="granted", limit=10)
    assert keep.at < warning.at and keep.seq > warning.seq
    for _ in range(36):  # three hours of sweeps
        steward.sweep(5)
    notices = _executed(deps, "notify")
    stops = _executed(deps, "terminate")
    steward.close()
    assert stops, "never stopped (the new warning was never sent, or never licensed the stop)"
    again = [w for w in notices if w.seq > keep.seq]
    assert again and stops[0].at >= again[0].at + timedelta(seconds=deps.policy.warning.min_notice), (
        f"stopped at {stops[0].at:%H:%M:%S} on the {warning.at:%H:%M:%S} warning the keep (recorded after it, dated "
        f"{keep.at:%H:%M:%S}) answered; warnings since the keep: {[w.at.strftime('%H:%M') for w in again]}")
