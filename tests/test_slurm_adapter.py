"""SlurmScheduler without a cluster: output parsing across Slurm versions, ids, logs, stops and CLI errors."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from tools.slurm import JOB_ID_LABEL, SlurmScheduler, slurm_scheduler_from_settings, steward_ids
from tools.slurm_cli import SlurmCli, SlurmError
from tools.slurm_logs import dated_lines, line_time, tail_log
from tools.slurm_parse import (
    SEP,
    expand_hostlist,
    gpus_in_gres,
    gpus_in_tres,
    jobs_from_json,
    jobs_from_text,
    key_values,
)

T0 = 1_795_966_000

JSON_OLD = {"jobs": [  # Slurm 22.05, OpenAPI v0.0.38
    {"job_id": 11, "name": "train", "partition": "gpu", "user_name": "alice", "account": "", "qos": "normal",
     "job_state": "RUNNING", "nodes": "gpu[01-02]", "node_count": 2, "start_time": T0,
     "tres_alloc_str": "cpu=2,node=2,billing=2", "tres_per_node": "gres:gpu:4"},
    {"job_id": 12, "name": "wait", "partition": "gpu", "user_name": "bob", "account": "ml", "qos": "",
     "job_state": "PENDING", "nodes": "", "node_count": 1, "start_time": T0 + 3600,  # the expected start
     "tres_per_node": "gres:gpu:a100:2"},
]}
JSON_NEW = {"jobs": [  # Slurm >= 23.11: state lists and {"set", "number"} numbers
    {"job_id": 21, "name": "train", "partition": "gpu", "user_name": "carol", "account": "research", "qos": "high",
     "job_state": ["RUNNING"], "nodes": "gpu03", "node_count": {"set": True, "infinite": False, "number": 1},
     "start_time": {"set": True, "infinite": False, "number": T0}, "tres_alloc_str": "cpu=8,gres/gpu=4"},
    {"job_id": 22, "name": "cpu-only", "partition": "cpu", "user_name": "dave", "job_state": ["COMPLETED"],
     "nodes": "cpu1", "node_count": {"set": True, "number": 1}, "start_time": {"set": False, "number": 0}},
]}


def test_hostlists_gres_and_tres():
    assert expand_hostlist("gpu[01-03,07],cpu1") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]
    assert expand_hostlist("rack[1-2]-n[1-2]") == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    assert expand_hostlist("(null)") == [] and expand_hostlist("") == []
    assert gpus_in_gres("gres:gpu:2") == 2 and gpus_in_gres("gpu:a100:4(S:0-1),gpu:v100:2") == 6
    assert gpus_in_gres("gres/gpu=3") == 3 and gpus_in_gres("gres:mps:100") == 0
    assert gpus_in_tres("cpu=1,gres/gpu=4,gres/gpu:a100=4") == 4 and gpus_in_tres("cpu=1,node=1") is None


def test_squeue_json_old_and_new_shapes():
    old = jobs_from_json(json.dumps(JSON_OLD))
    assert [(j.job_id, j.gpus, j.nodes, j.account, j.steward_state) for j in old] == [
        ("11", 8, ["gpu01", "gpu02"], None, "running"), ("12", 2, [], "ml", "pending")]
    assert old[0].started_at == datetime.fromtimestamp(T0, UTC) and old[1].started_at is None
    new = jobs_from_json(json.dumps(JSON_NEW))
    assert [(j.job_id, j.gpus, j.qos, j.steward_state) for j in new] == [
        ("21", 4, "high", "running"), ("22", 0, None, "completed")]
    with pytest.raises(ValueError, match="no job list"):
        jobs_from_json("slurm_load_jobs error")


def test_heterogeneous_job_components_carry_their_het_job_id():
    """scancel of a heterogeneous job's leader cancels every component (scancel(1)): the components are one job."""
    leader = {"job_id": 31, "name": "het", "partition": "gpu", "user_name": "eve", "job_state": ["RUNNING"],
              "nodes": "gpu05", "node_count": {"set": True, "number": 1}, "tres_alloc_str": "cpu=2,gres/gpu=1",
              "het_job_id": {"set": True, "infinite": False, "number": 31}, "het_job_offset": {"set": True, "number": 0}}
    member = dict(leader, job_id=32, partition="gpu-big", nodes="gpu06", tres_alloc_str="cpu=64,gres/gpu=8",
                  het_job_id=31, het_job_offset=1)
    alone = dict(leader, job_id=33, het_job_id={"set": True, "number": 0}, het_job_offset={"set": False, "number": 0})
    jobs = jobs_from_json(json.dumps({"jobs": [leader, member, alone]}))
    assert [(j.job_id, j.het_job_id) for j in jobs] == [("31", "31"), ("32", "31"), ("33", None)]


def test_squeue_text_output():
    line = SEP.join(["7_3", "gpu,debug", "erin", "(null)", "normal", "RUNNING", "2", "gres:gpu:2",
                     "2026-11-29T15:27:31", "n[1-2]", "name with | pipe"])
    [job] = jobs_from_text(line + "\n")
    assert (job.job_id, job.partition, job.gpus, job.nodes, job.name) == ("7_3", "gpu", 4, ["n1", "n2"],
                                                                          "name with | pipe")
    with pytest.raises(ValueError, match="fields"):
        jobs_from_text("1|gpu|x\n")


def test_array_tasks_are_named_as_scancel_must_take_them():
    """Slurm 22.05's JSON: a task carries its own numeric job_id, the pending remainder the array's; `scancel` of
    either number alone would hit the wrong jobs (the array's id cancels every task)."""
    base = dict(JSON_OLD["jobs"][0], name="arr", array_job_id=1)
    task = dict(base, job_id=2, array_task_id=0, array_task_string="")
    remainder = dict(base, job_id=1, array_task_id=None, array_task_string="2-5%3", job_state="PENDING")
    newer = dict(base, job_id=9, array_job_id={"set": True, "number": 8}, array_task_id={"set": True, "number": 4})
    jobs = jobs_from_json(json.dumps({"jobs": [task, remainder, newer]}))
    assert [(j.job_id, j.internal_id) for j in jobs] == [("1_0", "2"), ("1_[2-5]", "1"), ("8_4", "9")]
    assert sorted(steward_ids(jobs)) == ["gpu/arr-1_0", "gpu/arr-1_[2-5]", "gpu/arr-8_4"]
    # squeue text: %i names it, %A (last) is its own id; output without %A still reads.
    fields = ["1_[2-5%3]", "gpu", "erin", "(null)", "normal", "PENDING", "1", "gres:gpu:1", "N/A", "", "arr",
              "JobArrayTaskLimit", "2026-11-29T15:27:31"]
    [pending] = jobs_from_text(SEP.join([*fields, "1"]) + "\n")
    assert (pending.job_id, pending.internal_id) == ("1_[2-5]", "1")
    [old] = jobs_from_text(SEP.join(fields) + "\n")
    assert old.job_id == "1_[2-5]"


def test_colliding_names_get_the_slurm_id():
    jobs = jobs_from_json(json.dumps({"jobs": [dict(JSON_OLD["jobs"][0], job_id=5), dict(JSON_OLD["jobs"][0]),
                                               dict(JSON_OLD["jobs"][1])]}))
    assert sorted(steward_ids(jobs)) == ["gpu/train-11", "gpu/train-5", "gpu/wait"]


def test_scontrol_key_values_keep_spaces():
    rec = key_values("NodeName=n1 Gres=gpu:a100:8(S:0-1) OS=Linux 6.1 #1 SMP Partitions=gpu,prod")
    assert rec == {"NodeName": "n1", "Gres": "gpu:a100:8(S:0-1)", "OS": "Linux 6.1 #1 SMP", "Partitions": "gpu,prod"}


class Framed:
    """squeue text as a real squeue prints it for SlurmScheduler's format: each record between the marker the
    format asked for. rows: FRAMED_FIELDS values (%i %P %u %U %a %q %T %D %b %S %N %j %r %V %A), as squeue prints
    them (a name with newlines and separators printed raw)."""

    def __init__(self, rows):
        self.rows = rows

    def printed(self, args):
        marker = args[args.index("-o") + 1].split(SEP)[0]
        return "".join(SEP.join([marker, *row, marker]) + "\n" for row in self.rows)


class FakeCli(SlurmCli):
    """Answers from a table of (tool, first args) -> stdout or SlurmError."""

    def __init__(self, answers):
        super().__init__()
        self.answers = answers

    def run(self, tool, *args, ok_codes=(0,)):
        self.calls.append((tool, *args))
        for key, answer in self.answers.items():
            if (tool, *args)[: len(key)] == key:
                if isinstance(answer, Exception):
                    raise answer
                if isinstance(answer, Framed):
                    answer = answer.printed(args)
                return subprocess.CompletedProcess([tool, *args], 0, answer() if callable(answer) else answer, "")
        raise SlurmError([tool, *args], "exited 1: unexpected call", 1, "unexpected")


def test_falls_back_to_text_when_json_is_unsupported_and_tries_json_again_later():
    row = ["3", "gpu", "erin", "1000", "acct", "(null)", "RUNNING", "1", "gres:gpu:1", "N/A", "n1", "nb", "None",
           "2026-11-29T15:27:31", "3"]
    cli = FakeCli({("squeue", "--json"): SlurmError(["squeue", "--json"], "exited 1: unrecognized option", 1,
                                                    "squeue: unrecognized option '--json'"),
                   ("squeue", "-h"): Framed([row])})
    clock = [0.0]
    scheduler = SlurmScheduler(cli, monotonic=lambda: clock[0], json_retry_s=600)
    [job] = scheduler.list_jobs()
    assert (job.id, job.project, job.labels[JOB_ID_LABEL], job.gpus) == ("gpu/nb", "acct", "3", 1)
    assert scheduler.steward_id_for("3") == "gpu/nb" and scheduler.steward_id_for("4") is None
    scheduler.list_jobs()
    assert [c[:2] for c in cli.calls] == [("squeue", "--json"), ("squeue", "-h"), ("squeue", "-h")]
    # One failed JSON answer does not leave the adapter in text for good: JSON is asked again after a while.
    clock[0] = 601.0
    scheduler.list_jobs()
    assert [c[:2] for c in cli.calls][3:] == [("squeue", "--json"), ("squeue", "-h")]
    assert scheduler.output == "auto" and any("squeue --json failed" in w for w in scheduler.warnings)


def test_stops_are_graceful_then_forced_and_idempotent():
    listing = {"jobs": [dict(JSON_OLD["jobs"][0])]}
    cli = FakeCli({("squeue", "--json", "-j"): lambda: json.dumps(listing),
                   ("squeue", "--json"): lambda: json.dumps(listing),
                   ("squeue", "--steps"): "11.batch batch\n", ("scancel",): ""})
    scheduler = SlurmScheduler(cli, stop_settle_s=0)
    first = scheduler.stop_job("gpu/train", force=False, grace_s=60, reason="idle")
    assert first.status == "stopping" and ("scancel", "--signal=TERM", "--full", "11") in cli.calls
    job = scheduler.get_job("gpu/train")
    assert job.state == "stopping" and job.stop_requested_at is not None
    assert scheduler.stop_job("gpu/train", force=True, grace_s=60, reason="idle").status == "stopping"
    assert ("scancel", "11") in cli.calls
    listing["jobs"] = []
    assert scheduler.stop_job("gpu/train", force=True, grace_s=60, reason="idle").status == "already_gone"
    assert scheduler.get_job("gpu/train") is None
    with pytest.raises(ValueError, match="partition/jobname"):
        scheduler.get_job("train")


def test_logs_by_timestamp_or_mtime_and_missing_files(tmp_path):
    now = datetime(2026, 11, 29, 15, 0, tzinfo=UTC)
    assert line_time("[2026-11-29 15:00:01,250] step=1") == datetime(2026, 11, 29, 15, 0, 1, 250000, tzinfo=UTC)
    assert line_time("2026-11-29T16:00:00+01:00 x") == now and line_time("step 3") is None
    dated = dated_lines(["warmup", "2026-11-29T15:00:00Z step=1", "traceback line"], now + timedelta(hours=1))
    assert [d.at for d in dated] == [now, now, now]
    log = tmp_path / "plain.log"
    log.write_text("step=1\nstep=2\n")
    stamp = (now + timedelta(minutes=5)).timestamp()
    os.utime(log, (stamp, stamp))
    assert [line.text for line in tail_log(log, now, now + timedelta(minutes=10), limit=1)] == ["step=2"]
    assert tail_log(log, now, now + timedelta(minutes=1), limit=10) == []  # written after the window
    assert tail_log(tmp_path / "gone.log", now, now, limit=10) == []

    cli = FakeCli({("squeue", "--json"): json.dumps(JSON_OLD),
                   ("scontrol", "show", "job"): f"JobId=11 JobName=train UserId=alice({os.getuid()}) "
                                                 f"StdOut={tmp_path}/out-%j.log\n"})
    (tmp_path / "out-11.log").write_text("2026-11-29T15:00:00Z step=1 loss=0.5\n")
    lines = SlurmScheduler(cli).tail("gpu/train", now - timedelta(minutes=1), now + timedelta(minutes=1))
    assert [line.text for line in lines] == ["2026-11-29T15:00:00Z step=1 loss=0.5"]


def test_cli_errors_name_the_command(tmp_path):
    with pytest.raises(SlurmError, match="squeue --json` failed: .* not found"):
        SlurmCli(tmp_path).run("squeue", "--json")
    slow = tmp_path / "scontrol"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    with pytest.raises(SlurmError, match="timed out"):
        SlurmCli(tmp_path, timeout_s=0.2).run("scontrol", "show", "nodes")
    with pytest.raises(ValueError, match="not a directory"):
        SlurmCli(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a Slurm tool"):
        SlurmCli().run("rm", "-rf", "/")

    class Settings:
        slurm_bin_dir = tmp_path

    assert slurm_scheduler_from_settings(Settings()).cli.bin_dir == tmp_path


def test_a_job_still_running_after_its_graceful_stop_ignored_it_whatever_process_looks():
    """Slurm has no stopping state: the adapter marks a job it sent SIGTERM as stopping, in memory. A steward
    restarted since (a cron `steward sweep` always is) saw the signalled job as running, with a terminate on record,
    and proposed nothing ever again. The audit says this run was signalled: it is stopping, and its forced stop
    comes after the grace period (asking a person, as the policy says)."""
    from datetime import UTC, datetime, timedelta

    from agent.config.policy import Policy
    from agent.planning.policy_model import PolicyModel, signalled_state
    from core.actions import Finding, History, HistoryEntry
    from core.cluster import JobInfo

    now = datetime(2026, 12, 2, 16, 0, tzinfo=UTC)
    job = JobInfo(id="gpu/stub", uid="slurm:22", scheduler="slurm", namespace="gpu", name="stub", user="u", gpus=1,
                  state="running", started_at=now - timedelta(hours=3))
    signalled = HistoryEntry(action="terminate", target="gpu/stub", status="executed", at=now - timedelta(minutes=10),
                             finding_kind="idle", target_uid="slurm:22")
    history = History(entries=[signalled])
    assert signalled_state(job, history) == "stopping"
    # Another run under the id (requeued after the signal), or another job's record: running, a graceful stop first.
    requeued = job.model_copy(update={"started_at": now - timedelta(minutes=5)})
    assert signalled_state(requeued, history) == "running"
    other = job.model_copy(update={"uid": "slurm:23"})
    assert signalled_state(other, history) == "running"
    finding = Finding(kind="idle", target="gpu/stub", since=now - timedelta(hours=2), detected_at=now, evidence="idle",
                      gpus=1)
    step = PolicyModel._next_step(finding, signalled_state(job, history), history, Policy(), now, "slurm:22")
    assert step is not None and step.action == "force_terminate"


def test_a_job_id_slurm_hands_out_again_is_another_job():
    """slurmctld started over with a fresh state directory hands out job 25 again: the new job inherited the old
    one's warnings and stop record (warned twice, never stopped). The identity joins the submit time."""
    from datetime import UTC, datetime

    from tools.slurm import job_uid
    from tools.slurm_parse import SlurmJob

    old = SlurmJob(job_id="25", name="rq2", partition="gpu", user="u", account=None, qos=None, state="RUNNING",
                   gpus=1, submitted_at=datetime(2026, 12, 2, 16, 0, tzinfo=UTC))
    new = SlurmJob(**{**old.__dict__, "submitted_at": datetime(2026, 12, 2, 16, 38, tzinfo=UTC)})
    assert job_uid(old) != job_uid(new) and job_uid(old).startswith("slurm:25@")
    assert job_uid(SlurmJob(**{**old.__dict__, "submitted_at": None})) == "slurm:25"  # text output without %V


def test_a_job_with_srun_steps_gets_sigterm_in_its_steps_and_a_failed_scancel_is_a_failed_stop():
    """`--full` also signals the batch script's `srun`, which then kills its step after KillWait, cutting the
    checkpoint a SIGTERM handler writes: a job with steps is signalled in its steps. A scancel that could not reach
    slurmctld delivered nothing: the stop fails, rather than read later as a job that ignored SIGTERM."""
    listing = {"jobs": [dict(JSON_OLD["jobs"][0])]}
    cli = FakeCli({("squeue", "--steps"): "11.0 python\n11.batch batch\n11.extern extern\n",
                   ("squeue", "--json"): lambda: json.dumps(listing), ("scancel",): ""})
    result = SlurmScheduler(cli, stop_settle_s=0).stop_job("gpu/train", force=False, grace_s=60, reason="idle")
    assert ("scancel", "--signal=TERM", "11") in cli.calls and "its steps 11.0" in result.detail
    unreachable = SlurmError(["scancel"], "exited 1: Unable to contact slurm controller", 1,
                             "scancel: error: Unable to contact slurm controller (connect failure)")
    # Work in the batch script, an owner's shell (or a watcher) attached as a step: the batch script is signalled.
    for steps in ("11.0 bash\n11.batch batch\n", "11.1 nvidia-smi\n11.4294967295 extern\n"):
        cli = FakeCli({("squeue", "--steps"): steps, ("squeue", "--json"): lambda: json.dumps(listing),
                       ("scancel",): ""})
        SlurmScheduler(cli, stop_settle_s=0).stop_job("gpu/train", force=False, grace_s=60, reason="idle")
        assert ("scancel", "--signal=TERM", "--full", "11") in cli.calls, steps
    cli = FakeCli({("squeue", "--steps"): "11.batch batch\n", ("squeue", "--json"): lambda: json.dumps(listing),
                   ("scancel",): unreachable})
    with pytest.raises(SlurmError, match="Unable to contact"):
        SlurmScheduler(cli, stop_settle_s=0).stop_job("gpu/train", force=False, grace_s=60, reason="idle")
    assert ("scancel", "--signal=TERM", "--full", "11") in cli.calls


def test_nodes_for_a_removal_come_from_a_new_squeue_with_every_job_holding_them():
    """For removing a node: a new squeue (not the sweep's), and every job Slurm has given nodes that has not finished
    counts on them, whatever its state (CONFIGURING reads as pending for the sweep) or what it asks for."""
    from core.cluster import NodesUnknown

    def job(job_id, node, state, gres="gres:gpu:8"):
        return {"job_id": job_id, "name": f"j{job_id}", "partition": "gpu", "user_name": "alice", "account": "ml",
                "job_state": [state], "nodes": node, "node_count": {"set": True, "number": 1},
                "start_time": {"set": True, "number": T0}, "tres_per_node": gres}

    listing = {"jobs": [job(1, "n1", "RUNNING")]}
    cli = FakeCli({("squeue", "--json"): lambda: json.dumps(listing),
                   ("scontrol", "show", "nodes"): "".join(f"NodeName=n{i} Gres=gpu:a100:8 Partitions=gpu\n"
                                                          for i in range(1, 6))})
    slurm = SlurmScheduler(cli, stop_settle_s=0)
    slurm.list_jobs()  # the sweep's squeue
    listing["jobs"] += [job(2, "n2", "CONFIGURING"), job(3, "n3", "COMPLETING"), job(4, "n4", "RUNNING", ""),
                        job(5, "n5", "COMPLETED")]
    assert {n.name: n.jobs for n in slurm.list_nodes()}["n2"] == []  # the sweep's listing
    nodes = {n.name: n.jobs for n in slurm.list_nodes(for_removal=True)}
    assert nodes == {"n1": ["gpu/j1"], "n2": ["gpu/j2"], "n3": ["gpu/j3"], "n4": ["gpu/j4"], "n5": []}
    listing["jobs"].append(job(1, "n5", "RUNNING"))  # a job id in two records: which is Slurm's is unknown
    with pytest.raises(NodesUnknown, match="more than one squeue record"):
        slurm.list_nodes(for_removal=True)


# Slurm >= 23.02 JSON gives the state as flags with the base state first: a job cancelled or finished whose processes
# and epilog still run is ["CANCELLED", "COMPLETING"]; squeue's text output calls it COMPLETING. Read by its first
# word it was gone, and its node empty for a removal (review, eleventh round).
def _completing_job(job_id, node, state):
    return {"job_id": job_id, "name": f"j{job_id}", "partition": "gpu", "user_name": "alice", "account": "ml",
            "job_state": state, "nodes": node, "node_count": {"set": True, "number": 1},
            "start_time": {"set": True, "number": T0}, "tres_per_node": "gres:gpu:8"}


def test_a_completing_job_in_json_counts_on_its_node_for_removal():
    listing = {"jobs": [_completing_job(1, "n1", ["CANCELLED", "COMPLETING"]), _completing_job(2, "n2", ["COMPLETED", "STAGE_OUT"]),
                        _completing_job(3, "n3", ["COMPLETED", "COMPLETING"])]}
    cli = FakeCli({("squeue", "--json"): lambda: json.dumps(listing),
                   ("scontrol", "show", "nodes"): "".join(f"NodeName=n{i} Gres=gpu:a100:8 Partitions=gpu\n"
                                                          for i in range(1, 4))})
    nodes = {n.name: n.jobs for n in SlurmScheduler(cli, stop_settle_s=0).list_nodes(for_removal=True)}
    assert nodes == {"n1": ["gpu/j1"], "n2": ["gpu/j2"], "n3": ["gpu/j3"]}, nodes


def test_an_array_task_signal_is_taken_as_delivered_only_on_slurms_can_not_be_altered_answer():
    """Slurm 22.05 answers a signal to an array task of a throttled array with exit 229 ("Job can not be altered
    now") and delivers it: a stop that goes on. A controller that cannot be reached, or a timeout, delivered
    nothing, on an array task as on any job: a failed stop, never read later as a job that ignored SIGTERM."""
    task = dict(JSON_OLD["jobs"][0], name="arr", array_job_id=1, job_id=2, array_task_id=0, array_task_string="")
    listing = {"jobs": [task]}

    def stop(answer):
        cli = FakeCli({("squeue", "--steps"): "1_0.batch batch\n", ("squeue", "--json"): lambda: json.dumps(listing),
                       ("scancel",): answer})
        scheduler = SlurmScheduler(cli, stop_settle_s=0)
        [job] = scheduler.list_jobs()
        assert job.id == "gpu/arr" and job.labels["slurm.array_task"] == "1_0"
        try:
            return scheduler.stop_job(job.id, force=False, grace_s=60, reason="idle", uid=job.uid).status
        finally:
            assert ("scancel", "--signal=TERM", "--full", "1_0") in cli.calls

    assert stop(SlurmError(["scancel"], "exited 229: ", 229, "")) == "stopping"
    assert stop(SlurmError(["scancel"], "exited 229: Job can not be altered now", 229,
                           "scancel: error: Kill job error on job id 1_0: Job can not be altered now")) == "stopping"
    for failure in (SlurmError(["scancel"], "exited 1: Unable to contact slurm controller", 1,
                               "scancel: error: Unable to contact slurm controller (connect failure)"),
                    SlurmError(["scancel"], "timed out after 30s (is slurmctld reachable?)"),
                    SlurmError(["scancel"], "exited 1: Socket timed out on send/recv operation", 1,
                               "scancel: error: Socket timed out on send/recv operation")):
        with pytest.raises(SlurmError):
            stop(failure)


def test_a_run_requeued_under_the_same_job_id_is_not_stopping():
    """A job the steward sent SIGTERM requeues itself (`trap 'scontrol requeue $SLURM_JOB_ID' TERM`): the same job
    id, a new run (submitted and started again, a new uid). The signal was to the old run: the new one reads running
    (its stop starts with a graceful one), in a long-running server as after a restart."""
    first = dict(JSON_OLD["jobs"][0], submit_time=T0 - 600)
    listing = {"jobs": [first]}
    cli = FakeCli({("squeue", "--steps"): "11.batch batch\n", ("squeue", "--json"): lambda: json.dumps(listing),
                   ("scancel",): ""})
    scheduler = SlurmScheduler(cli, stop_settle_s=0)
    [job] = scheduler.list_jobs()
    assert scheduler.stop_job(job.id, force=False, grace_s=60, reason="idle", uid=job.uid).status == "stopping"
    [signalled] = scheduler.list_jobs()
    assert signalled.state == "stopping" and signalled.stop_requested_at is not None
    listing["jobs"] = [dict(first, submit_time=T0 + 3600, start_time=T0 + 3660)]
    [again] = scheduler.list_jobs()
    assert again.uid != job.uid
    assert (again.state, again.stop_requested_at) == ("running", None)
    # The same submit time (text output without %V: the uid is the id alone), started after the signal: a new run.
    scheduler = SlurmScheduler(cli, stop_settle_s=0, clock=lambda: datetime.fromtimestamp(T0 + 60, UTC))
    listing["jobs"] = [dict(first, submit_time=T0 - 600)]
    [job] = scheduler.list_jobs()
    scheduler.stop_job(job.id, force=False, grace_s=60, reason="idle", uid=job.uid)
    assert scheduler.get_job(job.id).state == "stopping"
    listing["jobs"] = [dict(first, submit_time=T0 - 600, start_time=T0 + 3660)]
    assert scheduler.get_job(job.id).state == "running"
    # The signalled run gone from a whole listing: its record goes too (a server runs for months).
    listing["jobs"] = []
    scheduler.list_jobs()
    assert scheduler._stop_sent == {}


def test_a_job_slurm_suspended_is_protected_not_idle():
    """A job suspended by the scheduler (PreemptMode=SUSPEND, `scontrol suspend`) was read as running: its stopped
    processes read idle, and it would have been warned and stopped, ending work Slurm had only paused (a probe read the
    parser). It is protected while suspended, in English and Chinese; a running job is not."""
    from agent.api.answerer import protection_reason_zh
    from agent.config.policy import Policy
    from agent.guardrail.protection import protection_reason
    from core.actions import History

    listing = {"jobs": [dict(JSON_NEW["jobs"][0], job_state=["SUSPENDED"]),
                        dict(JSON_NEW["jobs"][0], job_id=23, name="other")]}
    scheduler = SlurmScheduler(FakeCli({("squeue", "--json"): json.dumps(listing)}))
    suspended, running = scheduler.list_jobs()
    assert suspended.state == "running" and suspended.waiting == "SUSPENDED" and running.waiting is None
    now = datetime.fromtimestamp(T0, UTC) + timedelta(hours=3)
    why = protection_reason(suspended, Policy(), History(), now)
    assert why == "suspended by Slurm (SUSPENDED): it resumes where it stopped"
    assert protection_reason_zh(why).startswith("已被 Slurm 挂起")
    assert protection_reason(running, Policy(), History(), now) is None
