"""Two stewards on one data dir, and the audit store failing between an action and its outcome: what a cron sweep
beside the server, a second host completing an answer, or a locked audit database must never do (act twice, or
record a stop that took effect as failed). The real adapters against the loopback Kubernetes API and Prometheus
(tests/fault_world.py), on-disk SQLite stores."""

from __future__ import annotations

import os
import sqlite3
import threading
from datetime import timedelta

import pytest

from agent.graph.execute import OutcomeNotRecorded
from tests.fault_world import executions


@pytest.fixture
def world(fault_world):
    return fault_world


def test_an_audit_store_locked_right_after_an_eviction_never_records_the_stop_as_failed(world):
    server = world.service()
    world.at(80)
    server.sweep()  # warned
    server.deps.audit._conn.execute("PRAGMA busy_timeout = 300")
    real = server.deps.scheduler.stop_job
    held: list[sqlite3.Connection] = []

    def stop_then_lock(*a, **kw):  # another writer (a cron sweep, `steward approvals`) holds the audit for 0.45 s
        result = real(*a, **kw)
        conn = sqlite3.connect(str(world.data_dir / "audit.sqlite"), isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN IMMEDIATE")
        held.append(conn)
        threading.Timer(0.45, conn.rollback).start()
        return result

    server.deps.scheduler.stop_job = stop_then_lock
    world.at(110)
    with pytest.raises(OutcomeNotRecorded):
        server.sweep()  # the eviction went out; its outcome could not be written
    assert world.pod()["metadata"].get("deletionTimestamp")
    assert [e.status for e in executions(server.deps.audit, action="terminate")] == []  # not "failed"
    server.deps.scheduler.stop_job = real
    server.sweep()  # the next sweep (at once) settles the intent from fresh state: the pod is terminating
    stops = executions(server.deps.audit, action="terminate")
    assert [e.status for e in stops] == ["executed"], [(e.status, e.reason) for e in stops]
    assert "took effect" in (stops[0].reason or "")
    assert len(world.evictions()) == 1


def _other_process_store(steward, pid: int):
    """The approvals store as another process on this host opens it (claims made for `pid`)."""
    from agent.records.approvals import ApprovalStore

    steward.deps.approvals._conn.close()
    steward.deps.approvals = ApprovalStore(steward.deps.approvals.path, steward.deps.audit, holder_pid=pid)
    return steward


def test_a_cron_sweep_on_the_servers_host_does_not_carry_out_the_answer_the_server_is_carrying_out(tmp_path):
    """The claim on an answer named only the host: a cron sweep beside the server took the server's claim and
    carried out the same approved forced stop while the server's was on the wire (two intents, two forces)."""
    from tests.records_world import Steward

    server = Steward(tmp_path)
    approval = server.sweep_until_approval()
    cron = _other_process_store(Steward(tmp_path, cluster=server.cluster), os.getppid())  # alive, not us
    cluster = server.cluster

    class Scheduler:  # the server's view of the cluster; the cron sweep runs while the server's force is on the wire
        def __getattr__(self, name):
            return getattr(cluster, name)

        def stop_job(self, job_id, **kw):
            if kw.get("force"):
                cron.service.complete_answers()
            return cluster.stop_job(job_id, **kw)

    server.deps.scheduler = Scheduler()
    server.service.answer(approval.id, "approve", by="oncall-lead")
    intents = [e for e in server.deps.audit.entries(kind="intent", limit=100) if e.action == "force_terminate"]
    assert len(intents) == 1 and len([s for s in cluster.stops if s.force]) == 1


def test_a_claim_left_by_a_process_that_no_longer_runs_on_this_host_is_taken_back_at_once(tmp_path):
    """A restarted steward on the same host completes the answer its killed predecessor had claimed, without
    waiting for the claim to lapse; one left by a live process on another host waits."""
    import subprocess
    from datetime import UTC, datetime

    from agent.records.approvals import ApprovalStore
    from agent.records.audit import AuditLog

    dead = subprocess.Popen(["true"])
    dead.wait()
    audit = AuditLog(tmp_path / "audit.sqlite")
    store = ApprovalStore(tmp_path / "approvals.sqlite", audit, holder_pid=dead.pid)

    now = datetime.now(UTC)
    asked = store.request(proposal_key="k", target="ml/x", action="force_terminate", level=3, now=now,
                          expire_after_s=3600, payload={}, run_id="r1")
    store.answer(asked.id, decision="approve", by="lead", reason="", now=now, run_id="r1")  # then the process died
    here = ApprovalStore(tmp_path / "approvals.sqlite", audit)
    elsewhere = ApprovalStore(tmp_path / "approvals.sqlite", audit)
    elsewhere.host, elsewhere.holder = "other-host", "other-host/1"
    assert not elsewhere.claim(asked.id)  # another host: the claim may be live there
    assert here.claim(asked.id)  # this host, its process gone: taken back at once
    other = ApprovalStore(tmp_path / "approvals.sqlite", audit, holder_pid=os.getppid())
    assert not other.claim(asked.id)  # now held by a live process (this one): nobody else takes it


def test_a_job_that_ignored_sigterm_a_day_ago_is_still_one_the_steward_signalled(tmp_path):
    """Nobody answers the forced-stop request of a job that ignores SIGTERM. Past the history's 24 h its graceful stop
    used to be forgotten: the owner was warned again ("will be stopped gracefully") and the forced stop was never
    asked for again, so the job kept its GPUs for good. 30 h in, it is still asked about, and warned only once."""
    from tests.records_world import JOB, Steward

    steward = Steward(tmp_path)
    steward.sweep_until_approval()
    while steward.cluster.offset_s < 30 * 3600:
        steward.sweep(minutes=15)
    audit = steward.deps.audit
    done = [e for e in audit.entries(kind="execution", target=JOB, status="executed", limit=1000) if e.action]
    warnings = [e for e in done if e.action == "notify" and not (e.reason or "").startswith("asking an approver")]
    assert len(warnings) == 1, [(e.at, e.reason) for e in warnings]
    [signalled] = [e.at for e in done if e.action == "terminate"]
    asked = [e.at for e in audit.entries(kind="approval", status="pending", limit=1000) if e.target == JOB]
    assert asked and max(asked) > signalled + timedelta(hours=24), (signalled, asked)
    steward.close()


def test_a_keep_given_while_the_sweep_re_reads_the_job_holds_for_that_sweeps_stop(tmp_path):
    """ChatOps grants a keep without waiting for a running sweep. One that came while the stop step re-read the job
    (seconds to tens of seconds on a real cluster: its metrics, its pod, its log) was answered "kept ... will not stop
    it before then", and the same sweep stopped the job: the step had read the keeps once, before."""
    from fastapi.testclient import TestClient

    from agent.api.build import fast_forward
    from agent.chatops.commands import ChatCommands
    from agent.chatops.directory import UserDirectory
    from agent.chatops.router import offline_answer
    from agent.config.settings import Settings
    from server import create_app

    job = "ml-team/jupyter-carol"
    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, runbooks_enabled=False,
                        scenario="evals/scenarios/idle-notebook.yaml")
    app = create_app(settings, speed=0, start_s=0, run_scheduler=False)
    with TestClient(app, base_url="http://localhost"):
        rt = app.state.runtime
        fast_forward(rt, until_s=150 * 60)  # warned; the stop is due at the next sweep
        assert not [e for e in rt.deps.audit.entries(kind="execution", target=job) if e.action == "terminate"]
        chat = ChatCommands(lambda: rt, UserDirectory.from_settings(settings), offline_answer(lambda: rt))
        real_get = rt.deps.scheduler.get_job
        replies: list[str] = []

        def get_job(job_id, *a, **kw):  # the act step re-reads its target; the owner's keep arrives meanwhile
            if job_id == job and not replies:
                replies.append("")  # once: the keep itself reads the job too
                replies[0] = chat.handle("wecom", "carol", f"keep 4h {job} demo tonight")
            return real_get(job_id, *a, **kw)

        rt.deps.scheduler.get_job = get_job
        with rt.graph_lock:
            rt.sim_clock.cluster.advance(300)
        rt.sweep_now("schedule")
        stops = [e for e in rt.deps.audit.entries(kind="execution", target=job) if e.action == "terminate"]
        assert replies and replies[0].startswith("OK"), replies
        assert [e.status for e in stops] == ["blocked"], [(e.status, e.reason) for e in stops]
        assert "kept" in (stops[0].reason or "") or "exempt" in (stops[0].reason or ""), stops[0].reason


def test_an_answer_given_before_the_deadline_is_taken_while_a_sweep_holds_the_graph(tmp_path):
    """A sweep holds the graph lock for its whole run (80 s at 10k GPUs). An approval answered 1.5 s before its
    deadline waited for it, was judged against the clock after, and was refused as expired. It is judged as of when it
    arrived now, and carried out once the sweep is done."""
    import time as wall
    from datetime import timedelta

    from fastapi.testclient import TestClient

    from agent.api.build import fast_forward
    from agent.config.settings import Settings
    from server import create_app

    class MovingClock:  # a wall clock, as on a real cluster: it moves by itself while the sweep runs
        def __init__(self, start):
            self.start, self.t0 = start, wall.monotonic()

        def now(self):
            return self.start + timedelta(seconds=wall.monotonic() - self.t0)

    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, runbooks_enabled=False)
    app = create_app(settings, speed=0, start_s=0, run_scheduler=False)
    with TestClient(app, base_url="http://localhost") as client:
        rt = app.state.runtime
        fast_forward(rt, until_s=2 * 3600 + 55 * 60)  # the demo's forced stop waits for a human
        [pending] = [a for a in rt.deps.approvals.pending() if a.action == "force_terminate"]
        rt.deps.clock = MovingClock(pending.expires_at - timedelta(seconds=2))
        sweeping = threading.Event()

        def sweep_in_progress():
            with rt.graph_lock:
                sweeping.set()
                wall.sleep(3)

        sweep = threading.Thread(target=sweep_in_progress)
        sweep.start()
        sweeping.wait()
        assert rt.deps.clock.now() < pending.expires_at
        answered = client.post(f"/api/approvals/{pending.id}", json={"decision": "approve", "reason": "in time"})
        sweep.join()
        assert answered.status_code == 200, answered.json()
        assert rt.deps.approvals.get(pending.id).status == "approved"


def test_an_approved_stop_whose_outcome_could_not_be_written_is_settled_not_sent_again(tmp_path, monkeypatch):
    """An approved graceful stop went out; the audit refused its outcome, so the answer was deferred and completed
    again at the next sweep, which re-ran the stop: a second SIGTERM at once, on a scheduler that shows no stopping
    state (Slurm). The action's own unsettled intent is settled from fresh state instead."""
    import tests.records_world as records_world
    from agent.config.policy import Policy
    from tests.records_world import JOB, Steward

    policy = Policy.model_validate({"levels": {"max_auto": 1, "require_approval": [2, 3, 4]}})
    real_deps = records_world.simulated_deps
    monkeypatch.setattr(records_world, "simulated_deps", lambda sc, _p, pl, **kw: real_deps(sc, policy, pl, **kw))
    steward = Steward(tmp_path)
    cluster = steward.cluster

    class SlurmLike:  # a signalled job still reads RUNNING
        def __getattr__(self, name):
            return getattr(cluster, name)

        @staticmethod
        def _as_slurm(job):
            return None if job is None else job.model_copy(
                update={"scheduler": "slurm", "state": "running" if job.state == "stopping" else job.state})

        def list_jobs(self):
            return [self._as_slurm(j) for j in cluster.list_jobs()]

        def get_job(self, job_id):
            return self._as_slurm(cluster.get_job(job_id))

    steward.deps.scheduler = SlurmLike()
    approval = steward.sweep_until_approval()
    assert approval.action == "terminate"
    real_record = steward.deps.audit.record
    refused: list[bool] = []

    def record(kind, *args, **kw):  # the audit store refuses the stop's outcome once (locked by another writer)
        if kind == "execution" and kw.get("action") == "terminate" and not refused:
            refused.append(True)
            raise RuntimeError("database is locked")
        return real_record(kind, *args, **kw)

    steward.deps.audit.record = record
    assert steward.service.answer(approval.id, "approve", by="lead").state.get("deferred")
    steward.service.complete_answers()  # the next sweep's first step, or a restart
    assert len([s for s in cluster.stops if not s.force]) == 1
    [settled] = [e for e in steward.deps.audit.entries(kind="execution", target=JOB, limit=100)
                 if e.action == "terminate"]
    assert settled.status == "skipped" and "may have been sent" in (settled.reason or ""), settled.reason
    steward.close()


def test_an_answer_whose_claim_another_process_took_while_a_sweep_ran_is_not_carried_out_twice(tmp_path):
    """The answer is taken (and claimed) on arrival, and carried out once the running sweep lets go of the graph. If
    the sweep ran past the claim and another steward process took it over, this one leaves it to that process."""
    import time as wall

    from fastapi.testclient import TestClient

    from agent.api.build import fast_forward
    from agent.config.settings import Settings
    from agent.records.approvals import ApprovalStore
    from server import create_app

    settings = Settings(data_dir=tmp_path, leader_lock="none", sweep_every_s=300, runbooks_enabled=False)
    app = create_app(settings, speed=0, start_s=0, run_scheduler=False)
    with TestClient(app, base_url="http://localhost") as client:
        rt = app.state.runtime
        fast_forward(rt, until_s=2 * 3600 + 55 * 60)
        [pending] = [a for a in rt.deps.approvals.pending() if a.action == "force_terminate"]
        other = ApprovalStore(tmp_path / "approvals.sqlite", rt.deps.audit, holder_pid=os.getppid())
        sweeping, answered = threading.Event(), threading.Event()

        def long_sweep():  # holds the graph; meanwhile the answer's claim lapses and another process takes it
            with rt.graph_lock:
                sweeping.set()
                answered.wait(5)
                wall.sleep(0.5)
                with other._lock:
                    other._conn.execute("UPDATE approvals SET claimed_until = 0 WHERE id = ?", (pending.id,))
                assert other.claim(pending.id)

        sweep = threading.Thread(target=long_sweep)
        sweep.start()
        sweeping.wait()
        threading.Timer(0.2, answered.set).start()
        reply = client.post(f"/api/approvals/{pending.id}", json={"decision": "approve", "reason": "go"})
        sweep.join()
        assert reply.status_code in (200, 202), reply.json()
        forced = [e for e in rt.deps.audit.entries(kind="intent", limit=100) if e.action == "force_terminate"]
        assert forced == [], forced  # the other process carries it out, once
