"""A real single-node Slurm: the agent warns, then stops the idle job through SlurmScheduler, and only that one."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.config.policy import parse_policy
from agent.graph.deps import StewardDeps
from agent.graph.service import SweepService
from agent.planning.policy_model import PolicyModel
from agent.records.approvals import ApprovalStore
from agent.records.audit import AuditLog
from sim.cluster import SimCluster
from sim.scenario import parse_scenario
from tests.conftest import in_ci, require_binary
from tests.local_slurm import NODE, LocalSlurm
from tests.test_email_notify import Mailbox, smtp_server
from tools.email_notify import AddressBook, EmailNotifier
from tools.slurm import JOB_ID_LABEL, SlurmScheduler
from tools.slurm_cli import SlurmCli

pytestmark = pytest.mark.integration

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "sacct")
BUSY = ('i=0; while true; do i=$((i+1)); echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) step=$i loss=$((1000-i))e-3"; '
        "sleep 1; done")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    bins = {name: require_binary(name, f"/usr/sbin/{name}") for name in (*DAEMONS, *CLIENTS)}
    if os.geteuid() != 0:
        if in_ci():
            pytest.fail("the Slurm integration test runs its daemons as root")
        pytest.skip("the Slurm integration test runs its daemons as root")
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"), bins)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


class LiveSim:
    """Wall-clock time, and the simulated GPU metrics moved up to it: stands in for Prometheus + DCGM."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster

    def now(self) -> datetime:
        return datetime.now(UTC)

    def _catch_up(self, end: datetime) -> None:
        self.cluster.advance_to(max(self.cluster.offset_s, self.cluster.offset_of(end)))

    def gpu_series(self, end, lookback_s, slice_s):
        self._catch_up(end)
        return self.cluster.gpu_series(end, lookback_s, slice_s)

    def job_io_series(self, end, lookback_s, slice_s):
        self._catch_up(end)
        return self.cluster.job_io_series(end, lookback_s, slice_s)


def _scenario(start: datetime, notebook: str = "gpu/notebook"):
    # GPU metrics for the two Slurm jobs, by their steward ids; the history starts before the window.
    job = {"scheduler": "slurm", "user": "root", "node": NODE}
    return parse_scenario({
        "name": "slurm-live", "start": start.isoformat(), "duration": "2h", "step": "5s",
        "nodes": [{"name": NODE, "gpus": 8, "gpu_model": "A100-80GB"}],
        "jobs": [
            {**job, "id": "gpu/trainer", "gpus": 2,
             "phases": [{"gpu_util": [85, 99], "gpu_mem_gb": 60, "cpu_pct": [300, 400], "log": "loss"}]},
            {**job, "id": notebook, "gpus": 1,
             "phases": [{"gpu_util": 0, "gpu_mem_gb": 2, "cpu_pct": 0, "log": "silent"}]},
        ],
    })


POLICY = {
    "detectors": {"slice": "10s", "idle": {"window": "60s"}, "zombie": {"window": "60s"},
                  "overprovisioned": {"window": "60s"}, "pools": {"empty_window": "60s"},
                  "longtail": {"lookback": "120s"}},
    "warning": {"min_notice": "2s"},
    "stop": {"grace_period": "5s"},
}


def _wait_running(slurm: LocalSlurm, *job_ids: int) -> None:
    for _ in range(100):  # bounded poll for the scheduler to start them; not a timing assertion
        states = slurm.cli("squeue", "-h", "-o", "%i %T", "-j", ",".join(map(str, job_ids))).stdout.split()
        if states.count("RUNNING") == len(job_ids):
            return
        time.sleep(0.2)
    raise AssertionError(f"jobs {job_ids} did not start: {states}\n{slurm.logs()}")


def _job_record(slurm: LocalSlurm, job_id: int) -> dict[str, str]:
    from tools.slurm_parse import records

    out = slurm.cli("scontrol", "show", "job", "-o", str(job_id))
    assert out.returncode == 0, out.stderr
    return records(out.stdout)[0]


def _ended(slurm: LocalSlurm, job_id: int) -> dict[str, str]:
    for _ in range(100):
        rec = _job_record(slurm, job_id)
        if rec["JobState"] not in ("RUNNING", "COMPLETING", "PENDING"):
            return rec
        time.sleep(0.2)
    return rec


def test_agent_warns_then_stops_only_the_idle_slurm_job(slurm, tmp_path):
    """The owner's mailbox (a real SMTP server on loopback) has the warning before the job is stopped."""
    mailbox = Mailbox()
    with smtp_server(mailbox) as port:
        _warn_then_stop(slurm, tmp_path, EmailNotifier("127.0.0.1", "steward@example.org", port=port, timeout_s=5,
                                                       addresses=AddressBook(template="{user}@example.org")), mailbox)


def _warn_then_stop(slurm, tmp_path, notifier: EmailNotifier, mailbox: Mailbox) -> None:
    out = str(tmp_path)
    trainer = slurm.sbatch("-J", "trainer", "-p", "gpu", "--gres=gpu:2", "-D", out, "-o", f"{out}/trainer-%j.log",
                           "--wrap", BUSY)
    notebook = slurm.sbatch("-J", "notebook", "-p", "gpu", "--gres=gpu:1", "-D", out, "-o",
                            f"{out}/notebook-%j.log", "--wrap", "sleep 600")
    try:
        _wait_running(slurm, trainer, notebook)
        scheduler = SlurmScheduler(SlurmCli(env=slurm.env))
        jobs = {j.id: j for j in scheduler.list_jobs()}
        assert jobs["gpu/trainer"].gpus == 2 and jobs["gpu/notebook"].gpus == 1
        assert jobs["gpu/notebook"].labels[JOB_ID_LABEL] == str(notebook)
        assert scheduler.list_nodes()[0].gpus == 8
        # A job is judged idle only over a window it has lived through: let the notebook reach the idle window.
        started = jobs["gpu/notebook"].started_at or datetime.now(UTC)
        idle_window_s = parse_policy(POLICY).detectors.idle.window
        time.sleep(max(0.0, idle_window_s + 1 - (datetime.now(UTC) - started).total_seconds()))

        live = LiveSim(SimCluster(_scenario(datetime.now(UTC) - timedelta(minutes=10))))
        audit = AuditLog(":memory:")
        deps = StewardDeps(
            metrics=live, scheduler=scheduler, logs=scheduler, pools=live.cluster,
            notifier=notifier, clock=live, policy=parse_policy(POLICY), audit=audit,
            approvals=ApprovalStore(":memory:", audit), planner=PolicyModel(),
        )
        service = SweepService(deps)
        before = len(scheduler.calls)
        deps.observe()
        assert [c[0] for c in scheduler.calls[before:]].count("squeue") == 1  # one job listing, not one per job

        service.sweep("test")
        warned = audit.entries(kind="execution", status="executed", limit=50)
        assert [(e.action, e.target) for e in warned] == [("notify", "gpu/notebook")]
        assert slurm.cli("squeue", "-h", "-j", str(notebook), "-o", "%T").stdout.strip() == "RUNNING"
        # Delivered: the owner's mailbox holds the warning, with its deadline, before anything is stopped.
        [message] = mailbox.messages()
        owner = jobs["gpu/notebook"].user
        assert message["To"] == f"{owner}@example.org" and f"gpu/notebook (Slurm job {notebook})" in message["Subject"]
        assert "gpu/notebook" in message.get_content()
        assert not [c for c in scheduler.calls if c[0] == "scancel"]

        time.sleep(2.5)  # let the 2 s notice period pass in wall-clock time
        service.sweep("test")
        stops = [e for e in audit.entries(kind="execution", limit=50) if e.action in ("terminate", "force_terminate")]
        assert [(e.action, e.target, e.status) for e in stops] == [("terminate", "gpu/notebook", "executed")]

        cancels = [c for c in scheduler.calls if c[0] == "scancel"]
        assert cancels == [("scancel", "--signal=TERM", "--full", str(notebook))]
        ended = _ended(slurm, notebook)
        assert ended["JobState"] in ("CANCELLED", "FAILED", "COMPLETED"), ended
        assert ended["ExitCode"].endswith(":15"), ended  # it died of our SIGTERM
        assert _job_record(slurm, trainer)["JobState"] == "RUNNING"
        assert scheduler.get_job("gpu/trainer").state == "running"
        assert scheduler.stop_job("gpu/notebook", force=True, grace_s=0, reason="again").status == "already_gone"
    finally:
        slurm.cli("scancel", str(trainer), str(notebook))


def test_stopping_one_array_task_stops_only_that_task(slurm, tmp_path):
    """squeue --json gives an array task its own numeric id, and the task that keeps the array's id is the array:
    `scancel <array id>` cancels every task. Each task is named and stopped as <array>_<task>, the pending
    remainder as <array>_[<tasks>]; dcgm-exporter's hpc_job (the task's SLURM_JOB_ID) still maps to it."""
    out = str(tmp_path)
    array = slurm.sbatch("-J", "arr", "-p", "gpu", "--gres=gpu:1", "--array=0-5%2", "-D", out, "-o",
                         f"{out}/arr-%A_%a.log", "--wrap", "sleep 600")
    try:
        scheduler = SlurmScheduler(SlurmCli(env=slurm.env))
        for _ in range(100):  # bounded poll for two tasks to start
            running = [j for j in scheduler.list_jobs() if j.name == "arr" and j.state == "running"]
            if len(running) == 2:
                break
            time.sleep(0.2)
        jobs = [j for j in scheduler.list_jobs() if j.name == "arr"]
        by_task = {j.labels.get("slurm.array_task"): j for j in jobs}
        assert {f"{array}_0", f"{array}_1", f"{array}_[2-5]"} <= set(by_task), sorted(map(str, by_task))
        first, second = by_task[f"{array}_0"], by_task[f"{array}_1"]
        assert first.uid.startswith(f"slurm:{array}_0@") and first.labels[JOB_ID_LABEL] != str(array)
        assert scheduler.steward_id_for(first.labels[JOB_ID_LABEL]) == first.id
        # One running task stopped gracefully while the array still has pending tasks: Slurm 22.05's scancel exits
        # 229 ("Job can not be altered now") and delivers the signal all the same; the stop is not a failure.
        result = scheduler.stop_job(first.id, force=False, uid=first.uid)
        assert result.status in ("stopped", "stopping"), result
        # The pending remainder removed from the queue (its name moves as tasks start: read again): the other
        # running task runs on.
        time.sleep(1.0)
        [remainder] = [j for j in scheduler.list_jobs() if (j.labels.get("slurm.array_task") or "").startswith(
            f"{array}_[")]
        assert scheduler.stop_job(remainder.id, force=False, uid=remainder.uid).status in ("stopped", "stopping")
        time.sleep(1.0)
        left = {j.labels.get("slurm.array_task"): j.state for j in scheduler.list_jobs() if j.name == "arr"}
        assert left.get(f"{array}_1") == "running", (left, slurm.logs()[-2000:])
        assert left.get(f"{array}_0") != "running"
        assert not [u for u in left if u and u.startswith(f"{array}_[")]
        assert ("scancel", str(array)) not in scheduler.calls and second.state == "running"
    finally:
        slurm.cli("scancel", str(array))


def _checkpointing_step_job(slurm, out: Path, name: str) -> tuple[str, Path]:
    """An sbatch job whose work is an `srun` step with a SIGTERM handler that takes 3 s to checkpoint; (job id, the
    checkpoint file), once the step runs."""
    done = out / "ckpt.txt"
    train = out / "train.py.sh"  # the step's name is the program srun starts: not a shell attached beside the work
    train.write_text(f"#!/bin/bash\ntrap 'echo got TERM >> {done}; sleep 3; echo ckpt done >> {done}; exit 0' TERM\n"
                     "while true; do sleep 0.2; done\n")
    train.chmod(0o755)
    script = out / "train.sh"
    script.write_text(f"#!/bin/bash\nsrun {train}\n")
    job = slurm.sbatch("-J", name, "-p", "gpu", "--gres=gpu:1", "-D", str(out), "-o", f"{out}/steps-%j.log",
                       str(script))
    _wait_running(slurm, job)
    for _ in range(100):  # bounded poll for srun to start its step
        if f"{job}.0" in slurm.cli("squeue", "--steps", "-h", "-o", "%i", "-j", str(job)).stdout.split():
            break
        time.sleep(0.2)
    return job, done


def test_a_graceful_stop_lets_an_srun_step_finish_its_checkpoint(slurm, tmp_path):
    """The usual training job runs its work as an `srun` step inside sbatch. `scancel --signal=TERM --full` also
    signals that srun, which kills the step after KillWait (2 s here, 30 s by default): a SIGTERM handler that needs
    3 s to checkpoint was cut short. Signalled in its steps, the step checkpoints and exits on its own."""
    job, done = _checkpointing_step_job(slurm, tmp_path, "steps")
    try:
        scheduler = SlurmScheduler(SlurmCli(env=slurm.env), stop_settle_s=0)
        [steward] = [j for j in scheduler.list_jobs() if j.name == "steps"]
        result = scheduler.stop_job(steward.id, force=False, grace_s=20, uid=steward.uid)
        assert result.status in ("stopped", "stopping") and f"its steps {job}.0" in result.detail, result
        assert ("scancel", "--signal=TERM", str(job)) in scheduler.cli.calls
        ended = _ended(slurm, job)
        for _ in range(50):  # the step's handler sleeps 3 s before it writes its last line
            if done.exists() and "ckpt done" in done.read_text():
                break
            time.sleep(0.2)
        assert done.exists() and done.read_text().splitlines() == ["got TERM", "ckpt done"], (
            done.read_text() if done.exists() else "no checkpoint", ended, slurm.logs()[-1500:])
    finally:
        slurm.cli("scancel", str(job))


def test_a_steward_killed_after_scancel_does_not_signal_the_job_again_inside_its_grace(slurm, tmp_path):
    """Killed between `scancel --signal=TERM` and its audit, the restarted steward cannot tell from squeue whether the
    SIGTERM went out (a job handling it, or ignoring it, reads RUNNING). It used to settle the stop as not done and
    send a second SIGTERM at once, into the job's checkpoint. Now none goes out before the grace period has passed;
    after it, a second graceful stop (harmless to a job that ignored the first), never a forced one unasked."""
    from tests.fault_world import Killed, kill_at

    out = str(tmp_path)
    notebook = slurm.sbatch("-J", "notebook", "-p", "gpu", "--gres=gpu:1", "-D", out, "-o", f"{out}/nb-%j.log",
                            "--wrap", "trap '' TERM; while true; do sleep 1; done")
    mailbox = Mailbox()
    policy = parse_policy(POLICY)
    try:
        _wait_running(slurm, notebook)
        time.sleep(policy.detectors.idle.window + 2)
        # An earlier test's `notebook`, still listed, makes this one `gpu/notebook-<id>`: its metrics go by that id.
        [steward_id] = [j.id for j in SlurmScheduler(SlurmCli(env=slurm.env)).list_jobs()
                        if j.labels.get(JOB_ID_LABEL) == str(notebook)]
        live = LiveSim(SimCluster(_scenario(datetime.now(UTC) - timedelta(minutes=10), notebook=steward_id)))
        calls = []

        def process(port):  # a freshly started steward: a new adapter, the stores reopened from the data dir
            scheduler = SlurmScheduler(SlurmCli(env=slurm.env), stop_settle_s=0)
            calls.append(scheduler.calls)
            audit = AuditLog(tmp_path / "audit.sqlite")
            notifier = EmailNotifier("127.0.0.1", "steward@example.org", port=port, timeout_s=5,
                                     addresses=AddressBook(template="{user}@example.org"))
            deps = StewardDeps(metrics=live, scheduler=scheduler, logs=scheduler, pools=live.cluster,
                               notifier=notifier, clock=live, policy=policy, audit=audit,
                               approvals=ApprovalStore(tmp_path / "approvals.sqlite", audit), planner=PolicyModel())
            return SweepService(deps)

        def terms():
            return [c for cs in calls for c in cs if c[0] == "scancel" and "--signal=TERM" in c]

        with smtp_server(mailbox) as port:
            first = process(port)
            swept = first.sweep("test")  # warns
            assert len(mailbox.messages()) == 1, swept.report
            time.sleep(policy.warning.min_notice + 0.5)
            kill_at(first.deps.audit, "record",
                    when=lambda kind, **kw: kind == "execution" and kw.get("action") == "terminate")
            with pytest.raises(Killed):
                first.sweep("test")  # SIGTERM sent, then the process dies before its outcome is audited
            assert len(terms()) == 1
            second = process(port)
            second.sweep("test")
            time.sleep(1)
            second.sweep("test")
            rows = [(e.action, e.status, e.reason) for e in second.deps.audit.entries(
                kind="execution", target=None, limit=50, newest_first=False) if e.action == "terminate"]
            assert len(terms()) == 1, rows
            assert rows and rows[0][1] == "skipped" and "may have been sent" in rows[0][2], rows
            time.sleep(policy.stop.grace_period + 0.5)
            second.sweep("test")  # past the grace: a second graceful stop, recorded as carried out
            assert len(terms()) == 2
            done = [e for e in second.deps.audit.entries(kind="execution", limit=50) if e.action == "terminate"
                    and e.status == "executed"]
            assert len(done) == 1
            assert not [c for cs in calls for c in cs if c[0] == "scancel" and "--signal=KILL" in c]
    finally:
        slurm.cli("scancel", str(notebook))


def test_a_job_name_makes_no_squeue_record_of_another_job_and_odd_bytes_stop_no_listing(slurm, tmp_path):
    """sbatch takes newlines, the unit separator and bytes that are not UTF-8 in a job name, and squeue's text prints
    them raw. A name that ended its row and added one claiming another job (here in partition prod, as user mallory)
    made the steward warn its author and scancel the other job; a byte 0xff stopped the listing for everyone.
    Whatever the name, each job is read as itself, in JSON and in text."""
    from tools.slurm_parse import SEP

    out = str(tmp_path)
    victim = slurm.sbatch("-J", "llm-serve", "-p", "gpu", "--gres=gpu:1", "-D", out, "-o", "/dev/null",
                          "--wrap", "sleep 600")
    row = [str(victim), "prod", "mallory", "0", "(null)", "(null)", "RUNNING", "1", "gres:gpu:1",
           "2026-01-01T00:00:00", NODE, "llm-serve", "None", "2026-01-01T00:00:00", str(victim)]
    forged = SEP.join(["x", "None", "2026-01-01T00:00:00", ""]) + "\n" + SEP.join(row[:3] + row[4:11]) + "\n" + \
        SEP.join(row) + "\nSW0123456789abcdef" + SEP + SEP.join(row) + SEP + "SW0123456789abcdef"
    attacker = slurm.sbatch("-J", forged, "-p", "gpu", "-D", out, "-o", "/dev/null", "--wrap", "sleep 600")
    done = subprocess.run([slurm.bins["sbatch"], "--parsable", b"--job-name=bad\xffname", "-p", "gpu",
                           "--gres=gpu:1", "-D", out, "-o", "/dev/null", "--wrap", "sleep 600"],
                          env=slurm.env, capture_output=True, check=True, timeout=30)
    odd = int(done.stdout.split(b";")[0])
    try:
        _wait_running(slurm, victim)  # two CPUs here: the others may wait in the queue, listed all the same
        for mode in ("auto", "json", "text"):
            scheduler = SlurmScheduler(SlurmCli(env=slurm.env), output=mode)  # type: ignore[arg-type]
            listed = {j.labels[JOB_ID_LABEL]: j for j in scheduler.list_jobs()}
            assert {str(victim), str(odd)} <= set(listed) and str(attacker) not in listed, (mode, listed)
            assert (listed[str(victim)].namespace, listed[str(victim)].id) == ("gpu", "gpu/llm-serve"), mode
            assert listed[str(odd)].name == "bad\ufffdname", mode
            assert scheduler.steward_id_for(str(victim)) == "gpu/llm-serve", mode
            [mine] = [j for j in scheduler._jobs.values() if j.job_id == str(attacker)]
            assert mine.name == forged and mine.gpus == 0, mode
            assert not [j for j in scheduler._jobs.values() if j.user == "mallory"], mode
            assert scheduler.warnings == [], (mode, scheduler.warnings)
    finally:
        slurm.cli("scancel", str(victim), str(attacker), str(odd))


def test_a_field_a_job_owner_writes_cannot_point_the_steward_at_another_file(slurm, tmp_path):
    """`scontrol show job -o` prints MailUser after StdOut (and the name, comment and work dir before it): a mail user
    `m StdOut=/victim.log` made the steward read any file it could read as the job's log. The JSON's StdOut is read;
    from scontrol, a StdOut printed twice is no StdOut."""
    secret = tmp_path / "victim-secret.log"
    secret.write_text("2026-12-03T11:00:00Z VICTIM SECRET TOKEN=hunter2\n")
    workdir = tmp_path / f"w StdOut={secret}"
    workdir.mkdir(parents=True)
    own = tmp_path / "own.out"
    job = slurm.sbatch(f"--job-name=n StdOut={secret}", f"--comment=c StdOut={secret}",
                       f"--mail-user=m StdOut={secret}", "--mail-type=END", f"--chdir={workdir}", "-p", "gpu",
                       "--gres=gpu:1", "-o", str(own), "--wrap", 'echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) step=1"; '
                       "sleep 600")
    try:
        _wait_running(slurm, job)
        for _ in range(50):  # bounded poll for the job's first line
            if own.exists() and own.read_text():
                break
            time.sleep(0.2)
        now = datetime.now(UTC)
        for mode in ("json", "text"):
            scheduler = SlurmScheduler(SlurmCli(env=slurm.env), output=mode)  # type: ignore[arg-type]
            [steward] = [j for j in scheduler.list_jobs() if j.labels[JOB_ID_LABEL] == str(job)]
            lines = [line.text for line in scheduler.tail(steward.id, now - timedelta(hours=1), now)]
            assert not [text for text in lines if "SECRET" in text], (mode, lines)
            if mode == "json":
                assert [text.split()[-1] for text in lines] == ["step=1"], lines
            else:
                assert lines == [] and any("no single StdOut" in w for w in scheduler.warnings), scheduler.warnings
    finally:
        slurm.cli("scancel", str(job))


def test_a_steps_query_that_times_out_does_not_turn_a_graceful_stop_into_a_killwait_kill(slurm, tmp_path):
    """slurmctld busy for one command: the `squeue --steps` the graceful stop runs first times out. Read as "no
    steps", it sent `scancel --signal=TERM --full`, and srun killed the step after KillWait, cutting its checkpoint.
    The stop fails and nothing is signalled; the next sweep's stop signals the steps, and the checkpoint completes."""
    from tools.slurm_cli import SlurmError

    job, done = _checkpointing_step_job(slurm, tmp_path, "steps2")
    try:
        cli = SlurmCli(env=slurm.env)
        scheduler = SlurmScheduler(cli, stop_settle_s=0)
        [steward] = [j for j in scheduler.list_jobs() if j.name == "steps2"]
        real = cli.run

        def slow_steps(tool, *args, **kw):  # slurmctld busy: this one RPC times out
            if tool == "squeue" and "--steps" in args:
                raise SlurmError([tool, *args], f"timed out after {cli.timeout_s:g}s (is slurmctld reachable?)")
            return real(tool, *args, **kw)

        cli.run = slow_steps  # type: ignore[method-assign]
        result = scheduler.stop_job(steward.id, force=False, grace_s=20, uid=steward.uid)
        assert result.status == "error" and "steps could not be read" in result.detail, result
        assert not [c for c in cli.calls if c[0] == "scancel"]
        assert _job_record(slurm, job)["JobState"] == "RUNNING"
        cli.run = real  # type: ignore[method-assign]
        again = scheduler.stop_job(steward.id, force=False, grace_s=20, uid=steward.uid)
        assert again.status in ("stopped", "stopping") and f"its steps {job}.0" in again.detail, again
        assert ("scancel", "--signal=TERM", str(job)) in cli.calls
        _ended(slurm, job)
        for _ in range(50):  # the step's handler sleeps 3 s before it writes its last line
            if done.exists() and "ckpt done" in done.read_text():
                break
            time.sleep(0.2)
        assert done.exists() and done.read_text().splitlines() == ["got TERM", "ckpt done"]
    finally:
        slurm.cli("scancel", str(job))
