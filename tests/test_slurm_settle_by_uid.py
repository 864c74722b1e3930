"""settle_interrupted settles an interrupted stop by the job's uid, never its name: on Slurm the steward id of a job
changes when a namesake is submitted (`gpu/lone` becomes `gpu/lone-7`, tools/slurm.py steward_ids), so get_job by
name finds nothing. A lookup by name recorded the stop that never went out as `executed` ("the job is gone"); the
policy model then took the job for one that ignored SIGTERM and proposed the forced stop. Only "no listed job has
that uid" is "gone"."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from agent.config.policy import Policy
from agent.graph.execute import settle_interrupted
from agent.guardrail.decide import Facts, decide
from agent.planning.policy_model import PolicyModel, signalled_state
from agent.records.audit import AuditLog
from core.actions import Finding, ProposedAction
from core.fencing import host_name
from tools.slurm import SlurmScheduler
from tools.slurm_cli import SlurmCli, SlurmError

SUBMIT = 1_795_966_000
NOW = datetime.fromtimestamp(SUBMIT, UTC) + timedelta(hours=4)


def job(job_id: int, submit: int) -> dict:
    return {"job_id": job_id, "name": "lone", "partition": "gpu", "user_name": "carol", "account": "", "qos": "normal",
            "job_state": "RUNNING", "nodes": "gpu01", "node_count": 1, "start_time": submit, "submit_time": submit,
            "tres_alloc_str": "cpu=2,gres/gpu=1"}


class FakeCli(SlurmCli):
    def __init__(self, listing):
        super().__init__()
        self.listing = listing

    def run(self, tool, *args, ok_codes=(0,)):
        self.calls.append((tool, *args))
        if tool == "squeue" and "--json" in args:
            return subprocess.CompletedProcess([tool, *args], 0, json.dumps({"jobs": self.listing}), "")
        raise SlurmError([tool, *args], "exited 1: unexpected call", 1, "unexpected")


class Clock:
    def now(self):
        return NOW


def dead_writer() -> dict:
    """The intent's writer: a steward process on this host that has since died (killed between intent and call)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return {"writer": f"{host_name()}/{proc.pid}", "process": f"{proc.pid}:deadbeef0000"}


def test_an_interrupted_stop_of_a_renamed_slurm_job_is_not_recorded_as_done(tmp_path):
    cli = FakeCli([job(7, SUBMIT)])
    slurm = SlurmScheduler(cli, stop_settle_s=0)
    [lone] = slurm.list_jobs()
    assert lone.id == "gpu/lone"
    audit = AuditLog(tmp_path / "audit.sqlite")
    warned_at = NOW - timedelta(hours=1, minutes=10)
    audit.record("execution", at=warned_at, run_id="r0", target="gpu/lone", action="notify", level=1,
                 status="executed", reason="idle", data={"action_id": "r0:n", "finding_kind": "idle",
                                                         "target_uid": lone.uid,
                                                         "deadline": (warned_at + timedelta(hours=1)).isoformat()})
    stopped_at = NOW - timedelta(minutes=10)
    # The steward wrote the stop's intent and was killed before scancel ran: nothing reached the job.
    audit.record("intent", at=stopped_at, run_id="r1", target="gpu/lone", action="terminate", level=2, status="acting",
                 reason="about to terminate gpu/lone", data={"action_id": "r1:t", "finding_kind": "idle", "gpus": 1,
                                                             "target_uid": lone.uid, **dead_writer()})
    # Meanwhile carol submits another `lone`: Slurm lists both, and the first is gpu/lone-7 now.
    cli.listing = [job(7, SUBMIT), job(8, SUBMIT + 3 * 3600)]
    assert {j.id: j.uid for j in slurm.list_jobs()}["gpu/lone-7"] == lone.uid
    assert not [c for c in cli.calls if c[0] == "scancel"]

    deps = SimpleNamespace(audit=audit, scheduler=slurm, clock=Clock(), pools=None)
    [settled] = settle_interrupted(deps, "r2")
    consequence = ""
    if settled.status == "executed":
        history = audit.history(NOW + timedelta(minutes=10))
        renamed = next(j for j in slurm.list_jobs() if j.uid == lone.uid)
        finding = Finding(kind="idle", target=renamed.id, since=NOW - timedelta(hours=3), detected_at=NOW,
                          evidence="idle", gpus=1)
        step = PolicyModel._next_step(finding, signalled_state(renamed, history), history, Policy(),
                                      NOW + timedelta(minutes=10), renamed.uid)
        force = ProposedAction(action="force_terminate", target=renamed.id, finding_kind="idle", target_uid=lone.uid)
        d = decide(force, Facts(now=NOW + timedelta(minutes=10), job=renamed, findings=[finding]), Policy(), history,
                   approved=True)
        consequence = (f"; next the policy model proposes {step.action if step else None} ({step.reason[:40] if step else ''}) "
                       f"and an approved force is {d.verdict} ({d.rule})")
    assert settled.status != "executed", (
        f"the stop that never reached Slurm job 7 (now gpu/lone-7, still running) is recorded {settled.status}: "
        f"{settled.reason}{consequence}")
