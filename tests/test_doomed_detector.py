"""Doomed jobs in the sweep: the simulator's finished-job history, the detector's level-1 advice, and the
policy key that makes a running repeat offender a stop candidate (warned first; the guardrail enforces it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.config.policy import Policy
from agent.detectors.doomed import DoomedJobDetector
from agent.detectors.evidence import describe
from agent.graph import deps as _deps  # noqa: F401 - registers the doomed kinds' words with the policy model
from agent.guardrail.case import Facts
from agent.guardrail.decide import decide
from agent.planning.policy_model import KIND_WORDS, PolicyModel, warning_message
from core.actions import History, HistoryEntry
from core.cluster import FinishedJob, JobInfo
from core.observation import Observation
from evals.runner import run_scenario
from evals.suite import SCENARIO_DIR
from sim.cluster import SimCluster
from sim.scenario import load_scenario

AT = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def _job(state: str = "running", started_s: float = 60.0, **kw: object) -> JobInfo:
    return JobInfo(id="ml/train", uid="u-now", scheduler="kubernetes", namespace="ml", name="train", user="alice",
                   gpus=8, node="n0", state=state, image="llm:v3", command="python train.py",  # type: ignore[arg-type]
                   started_at=AT - timedelta(seconds=started_s) if state == "running" else None, **kw)  # type: ignore[arg-type]


def _failures(n: int, reason: str = "CUDA out of memory", every_s: float = 600.0, last_end_s: float = 120.0,
              duration_s: float = 180.0, **kw: object) -> list[FinishedJob]:
    out = []
    for i in range(n):
        end = AT - timedelta(seconds=last_end_s + (n - 1 - i) * every_s)
        out.append(FinishedJob(id="ml/train", uid=f"u{i}", user="alice", gpus=8, image="llm:v3",
                               command=str(kw.get("command", "python train.py")),
                               started_at=end - timedelta(seconds=duration_s), ended_at=end,
                               state="failed", reason=reason))
    return out


def _obs(job: JobInfo, finished: list[FinishedJob]) -> Observation:
    return Observation(at=AT, slice_s=60, lookback_s=3600, jobs=[job], finished=finished)


def test_simulator_reports_finished_runs_with_command_and_reason() -> None:
    cluster = SimCluster(load_scenario(SCENARIO_DIR / "crash-loop-cuda-oom.yaml"))
    cluster.advance_to(25 * 60)
    finished = cluster.list_finished(cluster.now() - timedelta(days=1))
    llama = [f for f in finished if f.id == "ml-team/train-llama"]
    assert [f.state for f in llama] == ["failed", "failed", "failed"]
    assert {f.reason for f in llama} == {"CUDA out of memory"}
    assert llama[0].command == "python train.py --batch-size 64" and llama[0].image == "registry.local/llm:v3"
    assert (llama[0].ended_at - llama[0].started_at) == timedelta(minutes=3)


def test_crash_loop_scenario_flags_only_the_loop_and_stops_nobody() -> None:
    run = run_scenario(load_scenario(SCENARIO_DIR / "crash-loop-cuda-oom.yaml"), Policy(), PolicyModel())
    assert run.score.passed, run.score
    doomed = {f["job"]: f for f in run.findings if f["kind"] in ("doomed", "crash_loop")}
    assert set(doomed) == {"ml-team/train-llama"}  # vision/seg failed three times, each differently
    evidence = doomed["ml-team/train-llama"]["evidence"]
    assert "runs of image registry.local/llm:v3 (8 GPUs) all failed within 3m, each with CUDA out of memory" in evidence
    assert {f["kind"] for f in run.findings if f["job"] == "ml-team/train-llama"} == {"doomed"}
    told = [a for a in run.actions if a["action"] == "notify" and a["status"] == "executed"
            and a["job"] == "ml-team/train-llama"]
    # One message per period for the workload, not one per resubmitted run (each run is a new uid).
    assert len(told) == 1, [(a["at_s"], a.get("uid")) for a in told]
    assert not [a for a in run.actions if a["action"] in ("terminate", "force_terminate")]


def test_a_pod_restarting_in_place_in_the_simulator_is_told_as_doomed_and_never_stopped() -> None:
    """The simulator's restart_loop reports what the kubelet does (restartCount, the last termination, CrashLoopBackOff
    between runs): a vLLM rollout crash-looping at start-up (vllm#13582) is advice from its third restart; its GPUs'
    bursts and loads hid it before, when the format could not say it restarted."""
    scenario = load_scenario(SCENARIO_DIR / "vllm-rollout-crashloop-kv-cache-oom.yaml")
    cluster = SimCluster(scenario)
    pod = "serving/qwen72b-vllm-7c9d5f8b6-x2k4q"
    cluster.advance_to(3 * 60)
    first = cluster.get_job(pod)
    assert first is not None and first.restarts == 0 and first.last_exit_at is None and first.waiting is None
    cluster.advance_to(20 * 60)  # runs of 4 min every 9: the second ended at 13 min, backing off till 18, the third runs
    now = cluster.get_job(pod)
    assert now is not None and (now.restarts, now.waiting, now.last_run_s) == (2, None, 240.0)
    assert now.last_exit == "Error (exit 1)" and now.last_exit_at == scenario.start + timedelta(minutes=13)
    cluster.advance_to(24 * 60)  # the third ended at 22
    assert cluster.get_job(pod).waiting == "CrashLoopBackOff"  # type: ignore[union-attr]
    run = run_scenario(scenario, Policy(), PolicyModel())
    assert run.score.passed, run.score
    (found,) = [f for f in run.findings if f["job"] == pod]
    assert found["kind"] == "doomed" and "restarted 3 times" in found["evidence"]
    assert not [a for a in run.actions if a["action"] in ("terminate", "force_terminate")]


def test_the_streak_counts_every_consecutive_failure_and_reads_in_chinese() -> None:
    (f,) = DoomedJobDetector(Policy()).detect(_obs(_job(), _failures(5)))
    assert f.kind == "doomed" and f.metrics["runs"] == 5 and f.gpus == 8
    assert f.evidence.startswith("the last 5 runs of image llm:v3 (8 GPUs) all failed within 3m, each with CUDA")
    zh = describe(f, "zh")
    assert "镜像 llm:v3 最近 5 次运行（8 块 GPU）全部在 3 分钟内失败，原因均为 CUDA out of memory" in zh
    assert "doomed" in KIND_WORDS["zh"] and "crash_loop" in KIND_WORDS["en"]
    assert "它又在原样运行" in warning_message(f, Policy(), AT, "zh")


def test_not_flagged_when_the_history_says_otherwise() -> None:
    detector = DoomedJobDetector(Policy())
    assert detector.detect(_obs(_job(), _failures(2))) == []  # fewer than the rule's 3 runs
    mixed = _failures(3)
    mixed[1] = mixed[1].model_copy(update={"reason": "exit code 1"})
    assert detector.detect(_obs(_job(), mixed)) == []  # not one cause
    slow = _failures(3, duration_s=3600.0)
    assert detector.detect(_obs(_job(), slow)) == []  # not fast failures
    old = _failures(3, last_end_s=2 * 86400.0)
    assert detector.detect(_obs(_job(), old)) == []  # the latest is over a day old
    other = _failures(3, command="python eval.py")
    assert detector.detect(_obs(_job(), other)) == []  # another job
    assert detector.detect(_obs(_job(started_s=3600.0), _failures(3, last_end_s=3700.0))) == []  # outlived the loop
    assert detector.detect(_obs(_job(state="pending"), _failures(3)))[0].gpus == 0  # queued: holds nothing
    off = Policy.model_validate({"detectors": {"doomed": {"enabled": False}}})
    assert DoomedJobDetector(off).detect(_obs(_job(), _failures(5))) == []


def test_repeat_offender_is_a_stop_candidate_only_by_policy_and_only_after_a_warning() -> None:
    assert DoomedJobDetector(Policy()).detect(_obs(_job(), _failures(6)))[0].kind == "doomed"
    policy = Policy.model_validate({"detectors": {"doomed": {"stop_repeat_offenders": True}},
                                    "warning": {"min_notice": "2m"}})
    detector = DoomedJobDetector(policy)
    assert detector.detect(_obs(_job(), _failures(4)))[0].kind == "doomed"  # under repeat_offender_runs (5)
    assert detector.detect(_obs(_job(state="pending"), _failures(6)))[0].kind == "doomed"  # nothing runs yet
    (f,) = detector.detect(_obs(_job(), _failures(6)))
    assert f.kind == "crash_loop" and "repeat offender (6 failures in a row" in f.evidence
    # The waste is the loop: it began with the first failed run (ended 3,120 s ago after 180 s), not this run, so a
    # warning sent during an earlier run of the loop still announces the stop below.
    assert f.since == AT - timedelta(seconds=3300)
    # The policy model warns first (with a deadline), and proposes the stop only after the notice.
    step = PolicyModel._next_step(f, "running", History(), policy, AT, "u-now")
    assert step is not None and step.action == "notify" and step.finding_kind == "crash_loop"
    facts = Facts(now=AT, job=_job(), findings=[f], cluster_gpus=64)
    from core.actions import ProposedAction

    stop = ProposedAction(action="terminate", target="ml/train", finding_kind="crash_loop", target_uid="u-now")
    assert decide(stop, facts, policy, History()).verdict == "deny"  # never without a delivered warning
    warned = History(entries=[HistoryEntry(action="notify", target="ml/train", status="executed",
                                           at=AT - timedelta(minutes=3), finding_kind="crash_loop",
                                           deadline=AT - timedelta(minutes=1), target_uid="u-now")])
    assert PolicyModel._next_step(f, "running", warned, policy, AT, "u-now").action == "terminate"  # type: ignore[union-attr]
    assert decide(stop, facts, policy, warned).verdict == "allow"  # level 2, within levels.max_auto


def test_a_restart_loop_is_a_kubernetes_key_and_needs_a_run_length() -> None:
    import pytest
    from pydantic import ValidationError

    from sim.scenario import Job

    with pytest.raises(ValidationError, match="restart_loop is a Kubernetes container"):
        Job(id="a/b", scheduler="slurm", restart_loop={"run": "4m"})
    with pytest.raises(ValidationError, match="run"):
        Job(id="a/b", restart_loop={"backoff": "5m"})


def test_the_simulators_default_exit_reads_as_the_real_adapter_writes_it() -> None:
    """tools/k8s_pods._exit_reason renders a kubelet termination {reason: Error, exitCode: 1} as "Error (exit 1)":
    scenarios exercise the wording the product reads from a real pod."""
    from sim.scenario import RestartLoop
    from tools.k8s_pods import _exit_reason

    assert RestartLoop(run=60).reason == _exit_reason({"reason": "Error", "exitCode": 1})
