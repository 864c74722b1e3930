"""On Slurm a signalled job reads RUNNING (no stopping state; tools/slurm.py marks it stopping only in the memory of
the process that sent the SIGTERM). After a restart (a cron `steward sweep` always is one), the guardrail's
"a graceful stop is never sent twice" check (duplicate_rule: `job.state == "stopping"`) no longer sees the executed
terminate of this very job, so a terminate proposed again (by a model: the rules are only the floor) is allowed and
a second SIGTERM reaches a job checkpointing on the first. The guardrail reads "signalled" from the audit
(agent/guardrail/case.py signalled_state): a terminate executed for this uid, on a job started before it and still
running, makes the job stopping for every rule, so a second graceful stop is refused (already_done)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.config.policy import Policy
from agent.guardrail.decide import Facts, decide
from core.actions import Finding, History, HistoryEntry, ProposedAction
from core.cluster import JobInfo

NOW = datetime(2026, 12, 2, 16, 0, tzinfo=UTC)
JOB = JobInfo(id="gpu/train", uid="slurm:22@1764680000", scheduler="slurm", namespace="gpu", name="train", user="u",
              gpus=4, state="running", started_at=NOW - timedelta(hours=5))


def test_a_graceful_stop_on_record_is_not_sent_again_to_a_slurm_job_that_still_runs():
    warned = HistoryEntry(action="notify", target=JOB.id, status="executed", at=NOW - timedelta(hours=1, minutes=5),
                          finding_kind="idle", target_uid=JOB.uid, deadline=NOW - timedelta(minutes=5))
    sigterm = HistoryEntry(action="terminate", target=JOB.id, status="executed", at=NOW - timedelta(minutes=2),
                           finding_kind="idle", target_uid=JOB.uid, gpus=4)
    idle = [Finding(kind="idle", target=JOB.id, since=NOW - timedelta(hours=3), detected_at=NOW, evidence="0% for 3h",
                    gpus=4)]
    again = ProposedAction(action="terminate", target=JOB.id, finding_kind="idle", target_uid=JOB.uid,
                           proposed_by="llm:model")
    d = decide(again, Facts(now=NOW, job=JOB, findings=idle), Policy(), History(entries=[warned, sigterm]))
    assert d.verdict == "deny" and d.rule == "already_done", (f"a second SIGTERM to {JOB.id}, 2 minutes after the first (still inside its "
                                 f"{Policy().stop.grace_period:g} s grace period): {d.reason}")


def test_a_model_planned_terminate_after_a_restart_sends_no_second_sigterm(tmp_path):
    """End to end: a Slurm-like cluster, the graceful stop sent and audited; the steward restarts (a cron sweep); a
    planner that proposes `terminate` for the idle job (what a model does; the floor adds the policy model's force)
    gets it through the guardrail, and the job gets a second SIGTERM 2 minutes after the first."""
    from agent.planning.policy_model import PolicyModel
    from tests.records_world import JOB as STUBBORN
    from tests.records_world import Steward
    from tests.skewed_world import SlurmLike

    class ModelLike:
        """The policy model's proposals (the floor), plus a model's own `terminate` for every idle job."""

        name = "llm:test"

        def plan(self, findings, obs, history, deps):
            result = PolicyModel().plan(findings, obs, history, deps)
            jobs = obs.jobs_by_id()
            for f in findings:
                if f.kind == "idle" and f.target in jobs:
                    result.proposals.append(ProposedAction(action="terminate", target=f.target, finding_kind="idle",
                                                           target_uid=jobs[f.target].uid, proposed_by="llm:test",
                                                           reason="idle for hours"))
            return result

    first = Steward(tmp_path)
    cluster = first.cluster
    first.deps.scheduler = SlurmLike(cluster)
    while not [s for s in cluster.stops if s.job == STUBBORN]:
        first.sweep(5)
    first.close()
    second = Steward(tmp_path, cluster=cluster)  # restarted: a new process, the stores from the data dir
    second.deps.scheduler = SlurmLike(cluster)
    second.deps.planner = ModelLike()
    second.sweep(2)
    sigterms = [s for s in cluster.stops if s.job == STUBBORN and not s.force]
    assert len(sigterms) == 1, (f"{len(sigterms)} SIGTERMs, {sigterms[-1].at - sigterms[0].at:g} s apart, inside "
                                f"the {second.deps.policy.stop.grace_period:g} s grace period")
    refused = [e for e in second.deps.audit.entries(kind="decision", target=STUBBORN, limit=100)
               if e.action == "terminate" and e.status == "deny" and e.data.get("rule") == "already_done"]
    assert refused, "the model's second terminate is audited as refused (already_done)"
    second.close()
