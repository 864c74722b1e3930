"""Every warning still in force is a promise: a stop never lands before the deadline of the owner's latest warning.
Sequence: warned at 08:00 (deadline 09:00); the stop was held (refused by a PodDisruptionBudget, the rate limit, a
pending approval); the repeat warning at 12:00 says "stopped at 13:00"; a model-proposed stop at 12:10 was licensed
on the 08:00 warning (`min(warnings, key=due)`) before the guardrail honoured the latest deadline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.config.policy import Policy
from agent.guardrail.decide import Facts, decide
from core.actions import Finding, History, HistoryEntry, ProposedAction
from core.cluster import JobInfo

T = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
JOB = JobInfo(id="ml/nb", uid="uid-nb", scheduler="kubernetes", namespace="ml", name="nb", user="alice", gpus=2)


def warning(at: datetime) -> HistoryEntry:
    return HistoryEntry(action="notify", target=JOB.id, status="executed", at=at, finding_kind="idle",  # type: ignore[arg-type]
                        target_uid=JOB.uid, deadline=at + timedelta(hours=1))


def test_a_stop_never_lands_before_the_deadline_the_owners_latest_warning_states():
    policy = Policy()  # min_notice 1 h, repeat_every 4 h
    now = T + timedelta(hours=4, minutes=10)
    idle = [Finding(kind="idle", target=JOB.id, since=T - timedelta(hours=2), detected_at=now, evidence="0% for 6h")]
    first, repeat = warning(T), warning(T + timedelta(hours=4))
    stop = ProposedAction(action="terminate", target=JOB.id, finding_kind="idle", target_uid=JOB.uid,
                          proposed_by="llm:model")
    decision = decide(stop, Facts(now=now, job=JOB, findings=idle), policy, History(entries=[first, repeat]))
    assert decision.verdict == "deny", (
        f"stopped at {now:%H:%M} on the 08:00 warning, though the owner's latest warning (12:00) says the stop comes "
        f"at {repeat.deadline:%H:%M}: {decision.reason}")


def test_an_approved_stop_waits_for_the_deadline_of_the_repeat_warning_sent_while_it_was_pending(tmp_path, monkeypatch):
    """End to end with the built-in policy model: stops need approval (levels.max_auto 1). Warned at 10:00, the stop
    is asked for at 11:00; while the request is pending the owner is warned again at 14:00 ("stopped at 15:00"), and
    the pod annotated steward.io/stop-after=15:00. The approver says yes at 14:05: the stop runs at once, on the
    10:00 warning, 55 minutes before the deadline the owner was just given."""
    import tests.records_world as records_world
    from tests.records_world import JOB, Steward

    policy = Policy.model_validate({"levels": {"max_auto": 1, "require_approval": [2, 3, 4]}})
    real_deps = records_world.simulated_deps
    monkeypatch.setattr(records_world, "simulated_deps", lambda sc, _p, pl, **kw: real_deps(sc, policy, pl, **kw))
    steward = Steward(tmp_path)
    approval = steward.sweep_until_approval()
    assert approval.action == "terminate"
    deps = steward.deps

    def warnings():
        return [e for e in deps.audit.entries(kind="execution", target=JOB, status="executed", limit=100,
                                              newest_first=False) if e.action == "notify"]

    while len(warnings()) < 2:  # nobody answers yet; the owner is warned again after repeat_every
        steward.sweep(5)
        assert steward.cluster.offset_s < 6 * 3600
    latest = warnings()[-1]
    steward.cluster.advance(300)
    steward.service.answer(approval.id, "approve", by="lead", reason="idle all morning")
    stops = [e for e in deps.audit.entries(kind="execution", target=JOB, status="executed", limit=100)
             if e.action == "terminate"]
    latest_deadline = datetime.fromisoformat(latest.data["deadline"])
    assert not stops or stops[0].at >= latest_deadline, (
        f"stopped at {stops[0].at:%H:%M}; the owner's latest warning, delivered at {latest.at:%H:%M}, says the stop "
        f"comes at {latest_deadline:%H:%M}")
    steward.close()
