"""A warning's time and deadline are taken when it leaves, and recorded from when the channel accepted it: a slow
re-read of the job (a PromQL round per field against a slow Thanos) or a slow channel before the send no longer
shortens the notice the owner gets (it was stamped with the clock read when execute_action started)."""

from __future__ import annotations

from datetime import timedelta

from tests.records_world import JOB, Steward


def test_the_stop_comes_a_full_notice_after_the_warning_reached_the_owner(tmp_path):
    steward = Steward(tmp_path)
    cluster, deps = steward.cluster, steward.deps
    notice = timedelta(seconds=deps.policy.warning.min_notice)

    real_plan = deps.planner.plan

    def plan(*a, **kw):  # planning takes a moment (any real clock moves between observe and act)
        cluster.advance(1)
        return real_plan(*a, **kw)

    deps.planner.plan = plan
    real_observe_job = deps.observe_job
    slow = []

    def observe_job(job, at=None):  # the re-read before the warning: Thanos answers slowly (10 minutes in all)
        if not slow:
            slow.append(1)
            cluster.advance(600)
        return real_observe_job(job, at)

    deps.observe_job = observe_job
    stop_at = None
    for _ in range(5 * 12):
        steward.sweep(5)
        stops = [e for e in deps.audit.entries(kind="execution", target=JOB, status="executed", limit=100)
                 if e.action == "terminate"]
        if stops:
            stop_at = stops[0].at
            break
    [message] = [m for m in deps.notifier.sent if m.job_id == JOB]
    [warning] = [e for e in deps.audit.entries(kind="execution", target=JOB, status="executed", limit=100)
                 if e.action == "notify"]
    assert stop_at is not None
    assert stop_at - message.at >= notice, (
        f"the owner got the warning at {message.at:%H:%M:%S} (audited at {warning.at:%H:%M:%S}, deadline "
        f"{warning.data['deadline']}) and the job was stopped at {stop_at:%H:%M:%S}: "
        f"{stop_at - message.at} of notice, less than the {notice} the policy promises")
    steward.close()
