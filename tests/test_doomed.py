"""Doomed jobs: the streak rules over finished history, no leakage from the future, the backtest and its CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.history.doomed import (
    CRASH_LOOP,
    DEFAULT_RULE,
    PLAIN_RULE,
    FinishedRun,
    JobToJudge,
    RunHistory,
    StreakRule,
    judge,
)
from evals.doomed_backtest import (
    JobTraceError,
    RuleScore,
    backtest,
    beats_plain_rule,
    by_slice,
    by_user_bootstrap,
    load_jobs,
    split,
)

JOB = JobToJudge(identity="alice|train.py|8", user="alice", gpus=8)


def failure(ended_at: float, duration_s: float = 120.0, reason: str = "CUDA OOM", identity: str = JOB.identity,
            state: str = "failed") -> FinishedRun:
    return FinishedRun(identity=identity, user="alice", gpus=8, ended_at=ended_at, state=state,
                       duration_s=duration_s, reason=reason)


def test_a_crash_loop_is_flagged_with_its_evidence_in_both_languages():
    history = RunHistory([failure(1000.0), failure(2000.0), failure(3000.0)])
    verdict = judge(CRASH_LOOP, history, JOB, now=3600.0)
    assert verdict is not None
    assert [r.ended_at for r in verdict.runs] == [1000.0, 2000.0, 3000.0]
    en = verdict.explain("en")
    assert "last 3 runs" in en and "CUDA OOM" in en and "2m" in en and "10m ago" in en
    zh = verdict.explain("zh")
    assert "最近 3 次运行" in zh and "CUDA OOM" in zh and "10 分钟前" in zh


def test_a_single_failure_is_not_flagged():
    history = RunHistory([failure(1000.0, state="completed"), failure(2000.0, state="completed"), failure(3000.0)])
    assert judge(CRASH_LOOP, history, JOB, now=3600.0) is None
    assert judge(PLAIN_RULE, history, JOB, now=3600.0) is None
    assert judge(CRASH_LOOP, RunHistory([failure(3000.0)]), JOB, now=3600.0) is None


@pytest.mark.parametrize("reason", ["NODE_FAIL", "PREEMPTED", "Evicted", "NodeLost", "Preempting (exit 137)",
                                    "DisruptionTarget: spot instance reclaimed"])
def test_runs_the_infrastructure_ended_are_no_failures_of_the_job(reason):
    """A spot pool reclaiming the node three times in a row says nothing about whether the job works."""
    history = RunHistory([failure(t, reason=reason) for t in (1000.0, 2000.0, 3000.0)])
    assert judge(CRASH_LOOP, history, JOB, now=3600.0) is None
    assert judge(PLAIN_RULE, history, JOB, now=3600.0) is None
    # The job's own failures still count, and an exit code that merely mentions a word does not hide one.
    assert judge(CRASH_LOOP, RunHistory([failure(t, reason="Error (exit 1)") for t in (1000.0, 2000.0, 3000.0)]),
                 JOB, now=3600.0) is not None


def test_an_outcome_not_yet_known_at_decision_time_is_not_used():
    # The third failure becomes known at t=5000: a decision at t=4000 sees two failures and a success before them.
    history = RunHistory([failure(500.0, state="completed"), failure(1000.0), failure(2000.0), failure(5000.0)])
    assert judge(CRASH_LOOP, history, JOB, now=4000.0) is None
    assert judge(PLAIN_RULE, history, JOB, now=4000.0) is None
    assert judge(CRASH_LOOP, history, JOB, now=5000.0) is not None


def test_slow_failures_stale_streaks_and_mixed_reasons_are_not_a_crash_loop():
    slow = RunHistory([failure(t, duration_s=7200.0) for t in (10_000.0, 20_000.0, 30_000.0)])
    assert judge(CRASH_LOOP, slow, JOB, now=31_000.0) is None
    assert judge(PLAIN_RULE, slow, JOB, now=31_000.0) is not None  # the plain rule ignores how long they ran
    stale = RunHistory([failure(t) for t in (1000.0, 2000.0, 3000.0)])
    assert judge(CRASH_LOOP, stale, JOB, now=3000.0 + 2 * 86400) is None
    mixed = RunHistory([failure(1000.0, reason="CUDA OOM"), failure(2000.0, reason="exit 1"), failure(3000.0)])
    assert judge(CRASH_LOOP, mixed, JOB, now=3600.0) is None


def test_another_job_of_the_same_user_and_gpus_feeds_the_plain_rule_only():
    other = RunHistory([failure(t, identity="alice|eval.py|8") for t in (1000.0, 2000.0, 3000.0)])
    assert judge(CRASH_LOOP, other, JOB, now=3600.0) is None
    assert judge(PLAIN_RULE, other, JOB, now=3600.0) is not None


def test_bad_rules_and_runs_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="runs must be at least 1"):
        StreakRule("x", key="identity", runs=0)
    with pytest.raises(ValueError, match="fast_s"):
        StreakRule("x", key="identity", fast_s=-5)
    with pytest.raises(ValueError, match="key must be"):
        StreakRule("x", key="image")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ended_at"):
        RunHistory([failure(float("nan"))])


TRACE_HEADER = "job_id,user,submit_time,gpus,cpus,nodes,state,duration_s\n"


def write_trace(path: Path, rows: list[tuple]) -> Path:
    path.write_text(TRACE_HEADER + "".join(",".join(str(x) for x in r) + "\n" for r in rows))
    return path


def crash_loop_trace(path: Path) -> Path:
    """User 1 loops: 8-GPU runs failing after 60 s, resubmitted every 10 min; user 2's jobs succeed."""
    rows = []
    for i in range(8):
        rows.append((2 * i, 1, 600 * i, 8, 40, 1, "failed", 60))
        rows.append((2 * i + 1, 2, 600 * i + 5, 1, 4, 1, "completed", 300))
    return write_trace(path, rows)


def test_the_backtest_flags_the_loop_and_never_the_job_by_its_own_outcome(tmp_path):
    jobs = load_jobs(crash_loop_trace(tmp_path / "t.csv"))
    result = backtest(jobs, jobs)
    by = {s.name: s for s in result.scores}
    # Runs 0-2 have no 3 known failures before them; runs 3-7 do. User 2 is never flagged.
    assert by[CRASH_LOOP.name].flagged == 5 and by[CRASH_LOOP.name].hits == 5
    assert by[CRASH_LOOP.name].precision == 1.0 and by[CRASH_LOOP.name].recall == 5 / 8
    assert by[CRASH_LOOP.name].gpu_hours_saved == pytest.approx(5 * 8 * 60 / 3600)
    assert by["base rate"].precision == 0.5
    # A delay longer than the resubmission gap hides the latest failure: one fewer flagged.
    late = {s.name: s for s in backtest(jobs, jobs, delay_s=600.0).scores}
    assert late[CRASH_LOOP.name].flagged == 4


def test_a_job_whose_outcome_is_known_at_its_own_submission_is_not_its_own_evidence(tmp_path):
    # Zero-second failures: each ends at its own submit time; the 4th job must not count itself.
    rows = [(i, 1, 100 * i, 2, 1, 1, "failed", 0) for i in range(4)]
    jobs = load_jobs(write_trace(tmp_path / "z.csv", rows))
    by = {s.name: s for s in backtest(jobs, jobs).scores}
    assert by[CRASH_LOOP.name].flagged == 1  # only the 4th has 3 earlier failures


def test_beats_plain_rule_needs_more_precision_and_fewer_false_flag_hours():
    plain = RuleScore("plain rule", flagged=10, hits=6, failed=20, gpu_hours_saved=5.0, false_flag_gpu_hours=100.0)
    better = RuleScore("crash loop", flagged=8, hits=6, failed=20, gpu_hours_saved=2.0, false_flag_gpu_hours=40.0)
    riskier = RuleScore("crash loop", flagged=8, hits=6, failed=20, gpu_hours_saved=2.0, false_flag_gpu_hours=150.0)
    vaguer = RuleScore("crash loop", flagged=20, hits=10, failed=20, gpu_hours_saved=9.0, false_flag_gpu_hours=10.0)
    assert beats_plain_rule(better, plain)
    assert not beats_plain_rule(riskier, plain)
    assert not beats_plain_rule(vaguer, plain)


def test_split_is_time_ordered(tmp_path):
    rows = [(i, 1, 1000 - i, 1, 1, 1, "completed", 5) for i in range(10)]  # written newest first
    history, scored = split(load_jobs(write_trace(tmp_path / "s.csv", rows)))
    assert len(history) == 6 and len(scored) == 4
    assert max(j.submit_s for j in history) < min(j.submit_s for j in scored)


def test_cli_json_shape_and_train(tmp_path, capsys):
    trace = crash_loop_trace(tmp_path / "late.csv")
    assert main(["doomed", "backtest", str(trace), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"rows", "default", "by_user_interval", "slices"}
    assert doc["default"] == DEFAULT_RULE.name
    assert set(doc["by_user_interval"]) == {"base rate", PLAIN_RULE.name, CRASH_LOOP.name}
    assert [(x["from"], x["to"]) for x in doc["slices"]] == [(0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0)]
    assert [r["name"] for r in doc["rows"]] == ["base rate", PLAIN_RULE.name, CRASH_LOOP.name]
    for row in doc["rows"]:
        assert set(row) == {"name", "precision", "recall", "flagged", "gpu_hours_saved"}
    assert main(["doomed", "backtest", str(trace), "--train", str(trace), "--json"]) == 0
    trained = json.loads(capsys.readouterr().out)
    # With --train, all of TRACE is scored after the earlier file's history: every run of the loop is flagged.
    loop = next(r for r in trained["rows"] if r["name"] == CRASH_LOOP.name)
    assert loop["flagged"] == 8 and loop["precision"] == 1.0


def test_cli_text_table(tmp_path, capsys):
    assert main(["doomed", "backtest", str(crash_loop_trace(tmp_path / "t.csv"))]) == 0
    out = capsys.readouterr().out
    assert "crash loop *" in out and "plain rule" in out and "base rate" in out
    assert "resamples of the 2 scored users (seed 0)" in out and "60%-80% (scored above)" in out


def test_the_spread_resamples_users_and_scores_each_slice_after_all_before_it(tmp_path):
    """One user's loop makes all the crash loop's flags: resampling users cannot move its precision, while the base
    rate (user 1 always fails, user 2 never) spans 0 to 1. Seeded: the same interval every run."""
    jobs = load_jobs(crash_loop_trace(tmp_path / "t.csv"))
    result = backtest(jobs, jobs)
    boot = by_user_bootstrap(result)
    assert boot.precision[CRASH_LOOP.name] == (1.0, 1.0) and boot.precision["base rate"] == (0.0, 1.0)
    assert by_user_bootstrap(result) == boot
    halves = by_slice(jobs, [], parts=2)
    assert [(a, b, r.scored) for a, b, r in halves] == [(0.0, 0.5, 8), (0.5, 1.0, 8)]
    # The second half is judged with the first as history: all four of its loop runs are flagged.
    assert {s.name: s for s in halves[1][2].scores}[CRASH_LOOP.name].flagged == 4


@pytest.mark.parametrize(("body", "message"), [
    ("user,submit_time,gpus,state\n1,0,1,failed\n", "missing column(s) duration_s"),
    (TRACE_HEADER + "0,1,0,1,1,1,exploded,5\n", "row 2, column 'state'"),
    (TRACE_HEADER + "0,1,zero,1,1,1,failed,5\n", "row 2, column 'submit_time'"),
    (TRACE_HEADER + "0,1,0,1.5,1,1,failed,5\n", "not a whole number of GPUs"),
    (TRACE_HEADER + "0,1,0,1,1\n", "row 2 has a different number of fields"),
])
def test_bad_traces_are_refused_naming_what_is_wrong(tmp_path, capsys, body, message):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(JobTraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_jobs(path)
    assert main(["doomed", "backtest", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_submit_times_may_be_iso_date_times(tmp_path):
    rows = [(i, 1, f"2020-06-01T00:{10 * i:02d}:00", 8, 40, 1, "failed", 60) for i in range(5)]
    jobs = load_jobs(write_trace(tmp_path / "iso.csv", rows))
    assert jobs[1].submit_s - jobs[0].submit_s == 600.0
    assert {s.name: s for s in backtest(jobs, jobs).scores}[CRASH_LOOP.name].flagged == 2
