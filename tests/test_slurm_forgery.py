"""A job's own text (its name, comment, mail user, output path) never creates or changes another job's record in the
Slurm adapter: squeue rows a name forges, a StdOut another field forges, ids a name collides with, bytes that are not
UTF-8, and a steps query left unanswered (docs/real-cluster-slurm.md, "What a job's own text cannot do")."""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime, timedelta

import pytest

from tests.test_slurm_adapter import JSON_OLD, FakeCli, Framed
from tools.slurm import SlurmScheduler, steward_ids
from tools.slurm_cli import SlurmCli, SlurmError
from tools.slurm_parse import SEP, jobs_from_json, jobs_from_text

NOW = datetime(2026, 11, 2, 12, tzinfo=UTC)


def _row(jid, part, user, acct, name, gres="gres:gpu:8"):
    return [str(jid), part, user, acct, "normal", "RUNNING", "1", gres, "2026-11-02T09:00:00", "n1", name]


def _json_job(jid, name, user, gpus, partition="gpu", account="a", **extra):
    return {"job_id": jid, "name": name, "partition": partition, "user_name": user, "user_id": extra.pop("uid", 0),
            "account": account, "qos": "normal", "job_state": "RUNNING", "nodes": "n1", "node_count": 1,
            "tres_alloc_str": f"cpu=4,gres/gpu={gpus}" if gpus else "cpu=1", "start_time": 1764690000,
            "submit_time": 1764690000, **extra}


def test_a_name_that_ends_its_squeue_row_makes_no_row_of_another_job():
    """mallory's job 400 is named so that squeue's text (one row a line) ends her row and
    adds one claiming bob's job 300 in another partition and account. That row is dropped and named, never read."""
    tail = ["None", "2026-11-02T08:59:00"]
    victim = SEP.join([*_row(300, "gpu", "bob", "prod", "llm-serve"), *tail, "300"])
    evil = SEP.join(["x", *tail, "400"]) + "\n" + SEP.join(_row(300, "scratch", "mallory", "research", "llm-serve"))
    mallory = SEP.join([*_row(400, "gpu", "mallory", "research", evil, gres="gres:gpu:0"), *tail, "400"])
    jobs = jobs_from_text(victim + "\n" + mallory + "\n")
    assert [(j.job_id, j.user, j.partition) for j in jobs] == [("300", "bob", "gpu"), ("400", "mallory", "gpu")]
    from tools.slurm_parse import read_text_listing

    listing = read_text_listing(victim + "\n" + mallory + "\n")
    assert [(j.job_id, j.user, j.partition) for j in listing.jobs] == [("300", "bob", "gpu"), ("400", "mallory", "gpu")]
    [dropped] = listing.dropped
    assert "%A 400 does not match %i 300" in dropped and "scratch" in dropped
    # A separator in a name (wrong field count) and control characters drop only that row, not the listing.
    odd = SEP.join([*_row(401, "gpu", "mallory", "r", "a" + SEP + "b"), *tail, "401"])
    bell = SEP.join([*_row(402, "gpu", "mallory", "r", "a\x07b"), *tail, "402"])
    listing = read_text_listing("\n".join([victim, odd, bell]) + "\n")
    assert [j.job_id for j in listing.jobs] == ["300"] and len(listing.dropped) == 2
    assert "fields" in listing.dropped[0] and "control characters" in listing.dropped[1]


def test_framed_squeue_records_keep_a_name_with_newlines_and_separators_inside_its_own_job():
    """The adapter's squeue text frames each record with a marker made for that call: the name (the one field an owner
    writes freely) is what lies between the fixed fields, whatever it holds, and cannot start a record."""
    forged = SEP.join(["x", "None", "2026-11-02T08:59:00", "400"]) + "\n" + SEP.join(
        ["300", "scratch", "mallory", "1001", "r", "normal", "RUNNING", "1", "gres:gpu:8", "2026-11-02T09:00:00", "n1",
         "llm-serve", "None", "2026-11-02T08:59:00", "300"])
    rows = [["300", "gpu", "bob", "1000", "prod", "normal", "RUNNING", "1", "gres:gpu:8", "2026-11-02T09:00:00", "n1",
             "llm-serve", "None", "2026-11-02T08:59:00", "300"],
            ["400", "gpu", "mallory", "1001", "r", "normal", "RUNNING", "1", "(null)", "2026-11-02T09:00:00", "n1",
             forged, "None", "2026-11-02T08:59:00", "400"]]
    scheduler = SlurmScheduler(FakeCli({("squeue", "-h"): Framed(rows)}), output="text")
    jobs = {j.labels["slurm.job_id"]: j for j in scheduler.list_jobs()}
    assert set(jobs) == {"300"} and (jobs["300"].user, jobs["300"].namespace) == ("bob", "gpu")
    assert scheduler.steward_id_for("300") == "gpu/llm-serve" and scheduler.warnings == []
    [mallory] = [j for j in scheduler._jobs.values() if j.job_id == "400"]  # CPU only: not a GPU job listed
    assert mallory.name == forged and mallory.user_id == 1001


def test_a_job_id_in_two_records_is_never_judged_or_stopped():
    """However a second record of job 300 got in, which is Slurm's is unknown: neither is listed or mapped to
    metrics, a stop of either id is refused, and the warnings say so."""
    listing = {"jobs": [_json_job(300, "llm-serve", "bob", 8), _json_job(300, "llm-serve", "mallory", 8,
                                                                         partition="scratch")]}
    cli = FakeCli({("squeue", "--json"): json.dumps(listing), ("scancel",): ""})
    scheduler = SlurmScheduler(cli, stop_settle_s=0)
    assert scheduler.list_jobs() == [] and scheduler.steward_id_for("300") is None
    assert any("300 appears in more than one squeue record" in w for w in scheduler.warnings)
    for target in ("scratch/llm-serve", "gpu/llm-serve", "gpu/llm-serve-300"):
        result = scheduler.stop_job(target, force=False, grace_s=0)
        assert result.status == "refused" and "more than one" in result.detail, (target, result)
    assert not [c for c in cli.calls if c[0] == "scancel"]


def test_a_stop_rereads_the_job_and_refuses_when_it_is_not_what_was_judged():
    """The listing said job 300 is mallory's in scratch; squeue -j 300 (the job's own record) says bob's in gpu:
    the stop is refused before any scancel."""
    listed = {"jobs": [_json_job(300, "llm-serve", "mallory", 8, partition="scratch", account="research")]}
    own = {"jobs": [_json_job(300, "llm-serve", "bob", 8, account="prod")]}
    cli = FakeCli({("squeue", "--json", "-j"): json.dumps(own), ("squeue", "--json"): json.dumps(listed),
                   ("squeue", "--steps"): "300.batch batch\n", ("scancel",): ""})
    scheduler = SlurmScheduler(cli, stop_settle_s=0)
    [job] = scheduler.list_jobs()
    result = scheduler.stop_job(job.id, force=True, grace_s=0, uid=job.uid)
    assert result.status == "refused" and "says user bob, partition gpu, account prod" in result.detail
    assert not [c for c in cli.calls if c[0] == "scancel"]


def test_a_cpu_decoy_named_like_a_suffixed_id_hides_no_gpu_job():
    """mallory's two GPU jobs `nb` (100, 101) are gpu/nb-100 and gpu/nb-101; a CPU job named `nb-100` (200) took
    gpu/nb-100 and job 100 vanished from the listing, its metrics and the report. Ids are unique whatever the names."""
    jobs = [_json_job(100, "nb", "mallory", 1), _json_job(101, "nb", "mallory", 1), _json_job(200, "nb-100", "m", 0)]
    scheduler = SlurmScheduler(FakeCli({("squeue", "--json"): json.dumps({"jobs": jobs})}), output="json")
    listed = {j.labels["slurm.job_id"]: j.id for j in scheduler.list_jobs()}
    assert set(listed) == {"100", "101"} and len(set(scheduler._jobs)) == 3
    assert scheduler.steward_id_for("100") == listed["100"] != scheduler.steward_id_for("200")
    assert scheduler.get_job(listed["100"]).labels["slurm.job_id"] == "100"
    assert scheduler.get_job(scheduler.steward_id_for("200")).labels["slurm.job_id"] == "200"
    # The id job 100 had before the decoy came still names job 100, not the decoy.
    assert scheduler.get_job("gpu/nb-100").labels["slurm.job_id"] == "100"
    # Deeper chains (a job named like each id a collision makes) still give every job its own id.
    chain = [*jobs, _json_job(300, "nb-100-100", "m", 0), _json_job(301, "nb-100-200", "m", 0)]
    ids = steward_ids(jobs_from_json(json.dumps({"jobs": chain})))
    assert len(ids) == 5 and {j.job_id for j in ids.values()} == {"100", "101", "200", "300", "301"}
    rng = random.Random(7)
    for _ in range(300):  # names built from each other's job ids, every way round: never two jobs on one id
        numbers = rng.sample(range(1, 30), 8)
        names = ["nb" + "".join(f"-{rng.choice(numbers)}" for _ in range(rng.randint(0, 3))) for _ in numbers]
        raw = [_json_job(n, name, "m", 1) for n, name in zip(numbers, names, strict=True)]
        listed = jobs_from_json(json.dumps({"jobs": raw}))
        assert len(steward_ids(listed)) == len(listed), names


def test_a_name_that_is_not_utf8_does_not_stop_the_listing(tmp_path):
    squeue = tmp_path / "squeue"
    body = json.dumps({"jobs": [_json_job(1, "train", "bob", 1), _json_job(2, "BAD", "eve", 1)]}).encode()
    (tmp_path / "out.json").write_bytes(body.replace(b"BAD", b"bad\xffname"))
    squeue.write_text(f"#!/bin/sh\ncat {tmp_path / 'out.json'}\n")
    squeue.chmod(0o755)
    names = sorted(j.name for j in SlurmScheduler(SlurmCli(tmp_path), output="auto").list_jobs())
    assert names == ["bad\ufffdname", "train"]


def test_an_unanswered_steps_query_fails_the_graceful_stop_instead_of_signalling_with_full():
    """`squeue --steps` timed out (slurmctld busy): read as "no steps", the batch script got SIGTERM with --full
    and srun killed the step after KillWait, cutting its checkpoint. The stop fails, to be tried at a later sweep."""
    listing = {"jobs": [dict(JSON_OLD["jobs"][0])]}
    timeout = SlurmError(["squeue", "--steps"], "timed out after 30s (is slurmctld reachable?)")
    cli = FakeCli({("squeue", "--steps"): timeout, ("squeue", "--json"): lambda: json.dumps(listing),
                   ("scancel",): ""})
    result = SlurmScheduler(cli, stop_settle_s=0).stop_job("gpu/train", force=False, grace_s=60, reason="idle")
    assert result.status == "error" and "steps could not be read" in result.detail and "timed out" in result.detail
    assert not [c for c in cli.calls if c[0] == "scancel"]
    # An answer with no work steps still signals the batch script and its children.
    cli = FakeCli({("squeue", "--steps"): "11.batch batch\n", ("squeue", "--json"): lambda: json.dumps(listing),
                   ("scancel",): ""})
    assert SlurmScheduler(cli, stop_settle_s=0).stop_job("gpu/train", force=False).status == "stopping"
    assert ("scancel", "--signal=TERM", "--full", "11") in cli.calls


@pytest.mark.skipif(os.geteuid() != 0, reason="chown of a file to another uid needs root")
def test_a_log_is_read_only_from_the_jobs_own_stdout_file(tmp_path):
    """`--mail-user="m StdOut=/victim.log"`: scontrol -o prints MailUser after StdOut, and the last value won, so the
    steward read any file it can read as the job's log. StdOut comes from squeue --json where it is given; from
    scontrol only when it appears once; and a file the job's user does not own is never read."""
    until = NOW + timedelta(minutes=1)
    own, victim = tmp_path / "own-11.log", tmp_path / "victim.log"
    own.write_text("2026-11-02T12:00:00Z step=1 loss=0.5\n")
    victim.write_text("2026-11-02T12:00:00Z VICTIM SECRET TOKEN=hunter2\n")
    os.chown(victim, 4242, 4242)
    # No StdOut in the JSON (an older Slurm): scontrol, where a job field printed another StdOut after Slurm's.
    job = _json_job(11, "train", "alice", 1, uid=os.getuid())
    forged = (f"JobId=11 JobName=train UserId=alice({os.getuid()}) StdOut={own} MailUser=m StdOut={victim} Power=\n")
    cli = FakeCli({("squeue", "--json"): json.dumps({"jobs": [job]}), ("scontrol", "show", "job"): forged})
    scheduler = SlurmScheduler(cli)
    assert scheduler.tail("gpu/train", NOW, until) == []
    assert any("no single StdOut" in w for w in scheduler.warnings)
    # The JSON's StdOut: nothing a field can forge, and no scontrol.
    job["standard_output"] = f"{tmp_path}/own-%j.log"
    cli = FakeCli({("squeue", "--json"): json.dumps({"jobs": [job]})})
    scheduler = SlurmScheduler(cli)
    assert [line.text for line in scheduler.tail("gpu/train", NOW, until)] == [own.read_text().strip()]
    assert not [c for c in cli.calls if c[0] == "scontrol"]
    # A StdOut that is the victim's file (a symlink the owner put there, or a path naming it): another uid owns it.
    job["standard_output"] = str(victim)
    scheduler = SlurmScheduler(FakeCli({("squeue", "--json"): json.dumps({"jobs": [job]})}))
    assert scheduler.tail("gpu/train", NOW, until) == []
    [why] = scheduler.warnings
    assert "owned by uid 4242, not the job's user" in why and "gpu/train" in why and "hunter2" not in why


def test_a_log_file_is_read_only_as_a_regular_file_its_owner_uid_owns(tmp_path):
    """Checked on the file opened (a symlink followed): a FIFO put in its place neither blocks the sweep nor reads."""
    from tools.slurm_logs import LogNotRead, tail_log

    log = tmp_path / "own.log"
    log.write_text("2026-11-02T12:00:00Z step=1\n")
    until = NOW + timedelta(minutes=1)
    assert len(tail_log(log, NOW, until, 10, owner_uid=os.getuid())) == 1
    with pytest.raises(LogNotRead, match=f"owned by uid {os.getuid()}, not the job's user"):
        tail_log(log, NOW, until, 10, owner_uid=os.getuid() + 1)
    link = tmp_path / "link.log"
    link.symlink_to(log)
    with pytest.raises(LogNotRead, match="owned by uid"):
        tail_log(link, NOW, until, 10, owner_uid=os.getuid() + 1)
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    with pytest.raises(LogNotRead, match="not a regular file"):
        tail_log(fifo, NOW, until, 10, owner_uid=os.getuid())
    assert tail_log(tmp_path / "gone.log", NOW, until, 10, owner_uid=os.getuid()) == []
