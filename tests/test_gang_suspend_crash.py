"""A crash after the owner's suspension and before the stop's outcome is audited."""
from agent.graph.service import SweepService
from agent.records.approvals import ApprovalStore
from agent.records.audit import AuditLog
from tests.k8s_fake_cluster import run_training_operator
from tests.test_kubernetes_sweep import _deps, _gang_world, _job_patches, _stops


class Killed(BaseException):
    pass


def test_crash_after_group_suspension_keeps_a_record_of_the_sibling_stopped(tmp_path):
    cluster, api, deps, job_uid = _gang_world(tmp_path, audit_path=tmp_path / "audit.db")
    real = deps.scheduler.stop_job

    def dies_after_call(*a, **kw):
        result = real(*a, **kw)
        if result.covered:
            raise Killed  # the process dies right after the PATCH, before the outcome is audited
        return result

    deps.scheduler.stop_job = dies_after_call
    try:
        service, minute = SweepService(deps), 10
        while minute <= 140:
            cluster.advance_to(minute * 60)
            try:
                service.sweep()
            except Killed:
                break
            run_training_operator(api.store)
            minute += 10
        assert len(_job_patches(api)) == 1
        run_training_operator(api.store)  # the operator deletes both pods
        fresh = _deps(api, cluster, tmp_path)
        fresh.audit = AuditLog(tmp_path / "audit.db")
        fresh.approvals = ApprovalStore(":memory:", fresh.audit)
        service = SweepService(fresh)
        for m in range(minute + 10, minute + 41, 10):
            cluster.advance_to(m * 60)
            service.sweep()
        w0 = [e for e in _stops(fresh, "ml/ddp-worker-0") if e.status == "executed"]
        w1 = [e for e in _stops(fresh, "ml/ddp-worker-1") if e.status == "executed"]
        assert w0, "the interrupted stop of worker-0 is settled"
        # worker-1 was stopped by the steward (its owner's suspension): its stop must be on record too
        assert w1, [(e.target, e.action, e.status, e.reason) for e in fresh.audit.entries(kind="execution", limit=50)]
    finally:
        api.stop()
