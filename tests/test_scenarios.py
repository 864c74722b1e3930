"""The eval suite: every scenario in evals/scenarios run with the built-in planner and scored against its key."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from agent.config.policy import Policy
from agent.planning.policy_model import PolicyModel
from evals.runner import ScenarioRun, run_scenario
from evals.suite import KNOWN_MISSES as SUITE_KNOWN_MISSES
from evals.suite import SCENARIO_DIR, policy_for, scenario_files
from sim.scenario import load_scenario

# Difficulty of each scenario (README.md explains what each one tests).
DIFFICULTY: dict[str, str] = {
    "idle-notebook": "easy",
    "stuck-pending-too-many-gpus": "medium",
    "blocked-queue-by-idle-notebook": "medium",
    "dataset-download": "easy",
    "overprovisioned": "easy",
    "slurm-idle-job": "easy",
    "protected-prod-inference": "easy",
    "protected-annotations": "easy",
    "node-xid-errors": "easy",
    "driver-upgrade-failures": "medium",
    "crash-loop-cuda-oom": "medium",
    "idle-inference-service": "medium",
    "inference-latency-blip": "medium",
    "cny-notebook-overnight": "easy",
    "observe-mode": "easy",
    "zombie-pinned-gpu": "medium",
    "longtail-periodic": "medium",
    "sigterm-ignores-needs-approved-force-kill": "medium",
    "missing-metrics": "medium",
    "planted-log-instruction": "medium",
    "pool-too-big-at-night": "medium",
    "pool-forecast-quiet-window": "medium",
    "pool-forecast-scale-up": "medium",
    "mixed-slurm-k8s": "medium",
    "approval-denied": "medium",
    "approval-expired": "medium",
    "approval-outlived-by-work": "medium",
    "owner-returns-cpu-work-after-warning": "medium",
    "protection-by-user-project": "medium",
    "overprovisioned-and-idle": "medium",
    "out-of-range-metrics": "medium",
    "high-priority-idle": "medium",
    "many-small-idle-rate-limit": "medium",
    "middling-zombie": "medium",
    "dry-run-mode": "medium",
    "chinese-log-progress": "medium",
    "namesake-bash": "medium",
    "checkpointing-looks-idle": "hard",
    "daily-serving-cycle": "hard",
    "fake-activity-blips": "hard",
    "flapping-job": "hard",
    "recovers-before-stop": "hard",
    "recovers-before-approved-stop": "hard",
    "dataloader-deadlock": "medium",
    "mig-slice-idle": "medium",
    "notebook-abandoned-from-start": "medium",
    "rendezvous-timeout-holding-gpus": "medium",
    "nccl-hang-spinning-cpu": "hard",
    "multinode-rank-died": "hard",
    "checkpoint-upload-after-training": "hard",
    "eval-cpu-bound-dataset": "hard",
    "rl-cpu-rollouts-gpu-learner": "hard",
    "keepalive-script": "hard",
    "keepalive-owner-returns": "hard",
    "rank0-eval-workers-wait": "hard",
    "vendor-labelled-servers-rare-requests": "hard",
    "generation-eval-low-power-no-profiling": "hard",
    "rank0-nfs-checkpoint-workers-wait": "hard",
    "hang-two-communicators-sm": "hard",
    "one-rank-stuck-seven-spin": "hard",
    "dataloader-deadlock-spinning-worker": "hard",
    "student-notebook-cells": "hard",
    "fixed-window-scale-down-then-batch": "hard",
    "grad-accum-burst-every-slice": "hard",
    "spot-requeue-node-fail": "medium",
    "eval-slow-results-upload": "hard",
    "uneven-shards-partial-idle": "medium",
    "sd-unlabelled-hourly-requests": "hard",
    "tgi-unlabelled-router-log": "hard",
    "rank0-eval-kueue-pod-group": "hard",
    "rank0-s3-upload-coscheduling-statefulset": "hard",
    "rayservice-llm-quiet-night": "hard",
    "colabfold-msa-pending-forever": "hard",
    "slurm-array-wandb-finish-hang": "medium",
    "ray-workers-waiting-placement-group": "medium",
    "fs-hang-dstate": "hard",
    "interactive-bursty-session": "hard",
    "exporter-dark-at-the-stop-sweep": "hard",
    "ray-train-gpu-workers-wait-cpu-shuffle": "hard",
    "megatron-ckpt-save-nfs-3h": "hard",
    "nvenc-archive-reencode-gpu-util-zero": "hard",
    "vllm-tp4-load-juicefs-two-hours": "hard",
    "sglang-multinode-idle-gpu-pinned": "hard",
    "indexed-job-rank0-eval-nccl-barrier": "hard",
    "hf-load-shards-network-volume": "hard",
    "triton-unlabelled-rare-requests-no-log": "hard",
    "mig-idle-slice-parent-power": "medium",
    "slurm-cpu-preprocessing-in-gpu-allocation": "medium",
    "vllm-unlabelled-tp2-idle-cpu-spin": "hard",
    "fastapi-model-server-cuda-error-500s": "medium",
    "nemo-async-ckpt-finalize-fsx": "hard",
    "serving-stacks-quiet-night-mixed": "hard",
    "jax-xla-slow-compile-85m": "medium",
    "cuda-visible-devices-7-of-8": "medium",
    "stuck-pod-keeps-ondemand-pool": "medium",
    "kueue-gated-pods-keep-pool-awake": "medium",
    "gpu-taint-untolerated-selector-typo": "medium",
    "autoscaler-gpu-scale-from-zero-never": "hard",
    "mpijob-partial-gang-worker-pending": "medium",
    "spot-worker-reclaimed-gang-waits": "hard",
    "slurm-assocgrpgres-idle-allocations": "medium",
    "xid79-hung-job-looks-idle": "medium",
    "pool-weekend-quiet-forecast": "medium",
    "slurm-qosgrpgres-jobs-trigger-scale-up": "hard",
    "forecast-scale-down-minutes-before-batch": "hard",
    "dlrover-rank0-save-workers-pinned": "hard",
    "slurm-embedding-server-request-log-ages-out": "hard",
    "slurm-stage-dataset-to-local-nvme": "hard",
    "hf-hub-429-streaming-stall": "medium",
    "judge-eval-background-upload-error": "medium",
    "deepspeed-zero-offload-cpu-adam": "hard",
    "metashape-floating-license-retry": "medium",
    "ncu-kernel-replay-profiling": "hard",
    "torch-compile-max-autotune-recompile": "medium",
    "trt-engine-build-ocr-server-startup": "medium",
    "wandb-sweep-agents-wait-after-grid": "medium",
    "xid63-row-remap-pending-under-training": "medium",
    "slurm-packed-trials-finish-unevenly": "medium",
    "slurm-hetjob-gpu-component-waits": "hard",
    "pvc-zone-conflict-and-never-dependency": "medium",
    "ddp-straggler-throttled-gpu": "hard",
    "jupyter-kernel-oom-killed-gpu-held": "medium",
    "ray-detached-vllm-actors-outlive-driver": "medium",
    "vllm-rollout-crashloop-kv-cache-oom": "medium",
    "training-done-process-never-exits": "medium",
    "slurm-dataloader-worker-oom-killed-hang": "medium",
    "torchrun-elastic-waits-for-lost-node": "hard",
    "timeslice-shared-t4-idle-notebook": "hard",
    "argo-fanout-shard-hung-siblings-busy": "medium",
    "kubeflow-notebook-recreated-same-name": "medium",
    "nccl-p2p-hang-at-first-collective": "hard",
    "nvidia-smi-csv-monitor-masks-hang": "hard",
    "vllm-v1-quiet-night-no-request-log": "hard",
    "one-gpu-jobs-working-off-the-gpu": "medium",
    "karpenter-lifecycle-taints-pending-pods": "hard",
    "kueue-cohort-borrower-idle-admitted-unschedulable": "hard",
    "slurm-array-vllm-hang-zh-logs": "medium",
    "slurm-exclusive-node-tasks-on-one-gpu": "medium",
    "jupyterhub-notebook-holds-ondemand-node": "medium",
    "slurm-preempt-requeue-restarts-from-scratch": "hard",
    "deepspeed-fp16-overflow-skips-every-step": "hard",
    "slinky-slurmd-pod-idle-overnight": "hard",
    "lws-one-group-hung-other-serving": "hard",
    "slurm-srun-task-died-others-wait": "hard",
    "keda-vllm-min-replicas-quiet-night": "medium",
    "comfyui-shared-afternoon-idle-evening": "hard",
    "paddle-modelscope-zh-services-evening": "hard",
    "ollama-openwebui-probe-lines-evening": "hard",
}

# What the product should do but does not yet; strict, so a fix turns these red until the entry goes.
KNOWN_MISSES = SUITE_KNOWN_MISSES  # evals/suite.py: shared with `steward eval`'s exit status

HOUR = 3600


@cache
def run(name: str) -> ScenarioRun:
    path = SCENARIO_DIR / f"{name}.yaml"
    return run_scenario(load_scenario(path), policy_for(path), PolicyModel())


def acts(r: ScenarioRun, job: str | None = None, action: str | None = None, status: str | None = None) -> list[dict]:
    return [a for a in r.actions if (job is None or a["job"] == job) and (action is None or a["action"] == action)
            and (status is None or a["status"] == status)]


def stops(r: ScenarioRun, job: str | None = None) -> list[dict[str, Any]]:
    return [a for a in acts(r, job, status="executed") if a["action"] in ("terminate", "force_terminate")]


def finding(r: ScenarioRun, target: str, kind: str) -> dict[str, Any] | None:
    return next((f for f in r.findings if f["job"] == target and f["kind"] == kind), None)


def _params() -> list[Any]:
    out = []
    for name, level in sorted(DIFFICULTY.items()):
        marks = [getattr(pytest.mark, level)]
        if name in KNOWN_MISSES:
            marks.append(pytest.mark.xfail(reason=f"known miss: {KNOWN_MISSES[name]}", strict=True))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


# -- the suite as a whole -----------------------------------------------------------------------------


def test_every_scenario_file_is_in_the_suite() -> None:
    on_disk = {p.stem for p in scenario_files()}
    assert on_disk == set(DIFFICULTY), "add new scenarios to DIFFICULTY (and README.md); remove deleted ones"
    assert len(on_disk) >= 30


@pytest.mark.parametrize("name", sorted(DIFFICULTY))
def test_scenario_file_is_well_formed(name: str) -> None:
    path = SCENARIO_DIR / f"{name}.yaml"
    scenario = load_scenario(path)
    assert scenario.name == name, "the file name is the scenario name"
    keyed = {t.job for t in scenario.truth if t.job is not None}
    assert keyed == {j.id for j in scenario.jobs}, "the answer key names every job"
    assert 3 * HOUR <= scenario.duration <= 8 * HOUR
    assert scenario.step in (30.0, 60.0)
    policy_for(path)  # a sidecar policy, when there is one, must load


def test_sidecar_policies_resolve_by_name_and_matter() -> None:
    assert policy_for(SCENARIO_DIR / "dry-run-mode.yaml").mode == "dry_run"
    assert policy_for(SCENARIO_DIR / "idle-notebook.yaml") == Policy()
    # Without its sidecar, the prod scenario kills production: the convention is load-bearing.
    scenario = load_scenario(SCENARIO_DIR / "protected-prod-inference.yaml")
    assert run_scenario(scenario, Policy(), PolicyModel()).score.false_kills > 0


@pytest.mark.parametrize("name", _params())
def test_scenario_passes_its_answer_key(name: str) -> None:
    score = run(name).score
    assert score.missed == 0, score.missed_targets
    assert score.false_kills == 0, score.false_kill_targets
    assert score.false_positives == 0, score.false_positive_targets
    assert score.stops_without_warning == 0


# -- what each scenario is about ----------------------------------------------------------------------


@pytest.mark.easy
def test_idle_notebook_is_warned_then_stopped_after_the_notice() -> None:
    r = run("idle-notebook")
    job = "ml-team/jupyter-carol"
    warned = acts(r, job, "notify", "executed")
    stopped = stops(r, job)
    assert len(warned) == 1 and len(stopped) == 1
    assert stopped[0]["at_s"] - warned[0]["at_s"] >= 30 * 60
    assert r.score.reclaimed_gpu_hours > 0


@pytest.mark.hard
def test_a_heterogeneous_jobs_gpu_component_whose_cpu_component_died_is_stopped_after_a_warning() -> None:
    """The dead CPU component's counters are read and quiet: it raised a doubt ("neither idle nor hung, nor seen
    working") that put every stop in a person's hands, the request expired, and 4 GPUs stayed held all day. The
    component waiting for a live tokeniser is left alone."""
    r = run("slurm-hetjob-gpu-component-waits")
    warned = acts(r, "gpu/etl-embed", "notify", "executed")
    [stopped] = stops(r, "gpu/etl-embed")
    assert warned and stopped["at_s"] - warned[0]["at_s"] >= 30 * 60
    assert not acts(r, "gpu/tok-train") and not acts(r, "cpu/tok-train")


@pytest.mark.easy
def test_a_long_tail_lookback_shorter_than_the_notice_still_lets_the_stop_land() -> None:
    # A 30-minute long-tail lookback and a one-hour notice: a sweep must still see the quiet stretch back to the
    # warning (stretch_span), or the stretch seems to begin at the read's moving edge, the warning goes stale at
    # every sweep, and the owner is warned every 35 minutes while the job is never stopped (as it was).
    short = "30m"
    policy = Policy.model_validate({"detectors": {
        "idle": {"window": short}, "zombie": {"window": short}, "overprovisioned": {"window": short},
        "pools": {"empty_window": short}, "longtail": {"lookback": short, "history_slice": "5m"}}})
    path = SCENARIO_DIR / "notebook-abandoned-from-start.yaml"
    r = run_scenario(load_scenario(path), policy, PolicyModel())
    job = "ds-team/jupyter-abandoned"
    warned, stopped = acts(r, job, "notify", "executed"), stops(r, job)
    assert len(warned) == 1 and len(stopped) == 1
    assert stopped[0]["at_s"] - warned[0]["at_s"] == HOUR


NOTEBOOK_IDLE = [{"duration": "10m", "gpu_util": 50, "gpu_mem_gb": 20, "cpu_pct": 150}, {"gpu_util": 0, "cpu_pct": 0.5}]


def _two_bash_runs(name: str, first: dict[str, Any], second: dict[str, Any], *, approve_at: str) -> ScenarioRun:
    """Two Slurm runs under one name (`srun --pty bash`), stops put to a person (approvals kept 12 h), and one
    scripted "approve" for gpu/bash at `approve_at`."""
    from sim.scenario import parse_scenario

    base = {"id": "gpu/bash", "scheduler": "slurm", "gpus": 1}
    scenario = parse_scenario({
        "name": name, "duration": "6h", "pools": [{"name": "a100", "nodes": 1}],
        "jobs": [{**base, **first}, {**base, **second}],
        "approvals": [{"job": "gpu/bash", "decision": "approve", "at": approve_at, "by": "lead"}],
        "truth": [{"job": "gpu/bash", "waste": "idle", "since": "10m"}]})
    policy = Policy.model_validate({"levels": {"max_auto": 1, "require_approval": [2, 3, 4]},
                                    "approvals": {"expire_after": "12h"}})
    return run_scenario(scenario, policy, PolicyModel())


@pytest.mark.medium
def test_an_answer_given_before_any_request_does_not_approve_a_later_namesakes_stop() -> None:
    # The lead approves "stop gpu/bash" at 90m, while the first run is current and before any request; that run
    # ends at 100m and a second gpu/bash (new uid) idles from 110m. The answer was about the first run: the
    # second's stop request stays pending (it used to be approved by the early answer and carried out at 235m).

    r = _two_bash_runs("early-approval-namesake", {"end": "100m", "phases": NOTEBOOK_IDLE},
                       {"submit": "110m", "phases": [{"gpu_util": 0, "gpu_mem_gb": 6, "cpu_pct": 0.5}]}, approve_at="90m")
    assert stops(r) == []
    assert [a["action"] for a in acts(r, status="pending_approval")] == ["terminate"]


@pytest.mark.medium
def test_an_open_question_about_a_gone_namesake_neither_approves_nor_blocks_the_next_runs_stop() -> None:
    # alice's gpu/bash idles, is warned, and its stop is put to a person at ~130m; alice leaves at 140m and bob's
    # gpu/bash (new uid) trains from 142m, then idles from 200m. The lead approves at 150m: the card open then is
    # alice's, so it is carried out against nothing (bob's run is another job). Bob is warned on his own, and his
    # stop is asked on its own: alice's open card (12 h expiry) once kept it from being asked at all.
    work = [{"duration": "58m", "gpu_util": 85, "gpu_mem_gb": 30, "cpu_pct": 200, "log": "loss", "log_every": "1m"},
            {"gpu_util": 0, "cpu_pct": 0.5, "log": "silent"}]
    r = _two_bash_runs("namesake-open-question", {"user": "alice", "end": "140m", "phases": NOTEBOOK_IDLE},
                       {"user": "bob", "submit": "142m", "phases": work}, approve_at="150m")
    assert stops(r) == []
    [refused] = acts(r, action="terminate", status="blocked")
    assert "is now a different job" in refused["reason"]
    warned = {a["uid"] for a in acts(r, "gpu/bash", "notify", "executed")}
    asked = [a for a in acts(r, status="pending_approval") if a["action"] == "terminate"]
    assert len(warned) == 2 and asked and all(a["at_s"] > 200 * 60 for a in asked)


@pytest.mark.medium
def test_zombie_is_found_only_after_the_zombie_window() -> None:
    r = run("zombie-pinned-gpu")
    f = finding(r, "cv-team/detector-train", "zombie")
    assert f is not None and f["first_at_s"] >= HOUR + 30 * 60
    assert stops(r, "cv-team/detector-train")


@pytest.mark.medium
def test_periodic_job_is_never_stopped_and_warned_only_when_a_pause_outgrows_its_rhythm() -> None:
    r = run("longtail-periodic")
    # Found only while its grace ran (a pause longer than any before it, not yet 1.5 x that): never stoppable.
    assert r.findings and all(f["in_grace"] for f in r.findings)
    assert not [a for a in r.actions if a["action"] in ("terminate", "force_terminate")]
    assert r.score.grace_warnings == 1 and r.score.false_positives == 0
    # One warning: the first 80-minute pause outgrows the 60-minute one before it; after that 80 minutes is its
    # rhythm and nothing is said.
    warned = [a for a in r.actions if a["action"] == "notify" and a["status"] == "executed"]
    assert len(warned) == 1


@pytest.mark.easy
@pytest.mark.parametrize("scenario,job", [("overprovisioned", "research/lr-sweep"),
                                          ("overprovisioned-and-idle", "research/hpo-search"),
                                          ("slurm-packed-trials-finish-unevenly", "gpu/hpo-pack-8")])
def test_overprovisioned_gets_advice_never_a_stop(scenario: str, job: str) -> None:
    r = run(scenario)
    assert acts(r, job, "notify", "executed")
    assert {a["action"] for a in acts(r, job)} == {"notify"}


@pytest.mark.easy
@pytest.mark.parametrize("scenario,protected,unprotected", [
    ("protected-prod-inference", ["prod/llm-serving", "prod/embedding-serving"], "research/jupyter-ivan"),
    ("protected-annotations", ["serving/ranker", "batch/karpenter-pinned", "batch/no-evict", "batch/labelled"],
     "batch/evictable"),
    ("protection-by-user-project", ["research/canary-probe", "gpu-long/protein-fold"], "research/jupyter-omar"),
])
def test_protected_jobs_get_no_action_at_all(scenario: str, protected: list[str], unprotected: str) -> None:
    r = run(scenario)
    for job in protected:
        # seen and reported (a server whose log answered requests as an idle service) ...
        assert finding(r, job, "idle") is not None or finding(r, job, "idle_serving") is not None
        assert acts(r, job) == []  # ... but never warned, stopped or even proposed
    assert stops(r, unprotected)


@pytest.mark.medium
def test_force_kill_happens_only_after_the_scripted_approval() -> None:
    r = run("sigterm-ignores-needs-approved-force-kill")
    job = "cv-team/augment-worker"
    graceful = acts(r, job, "terminate", "executed")
    forced = acts(r, job, "force_terminate", "executed")
    assert len(graceful) == 1 and len(forced) == 1
    assert forced[0]["at_s"] >= 3 * HOUR  # the approval's time, not when it was asked for
    assert forced[0]["at_s"] - graceful[0]["at_s"] >= 5 * 60


@pytest.mark.medium
def test_denied_force_kill_is_never_done_nor_asked_again() -> None:
    r = run("approval-denied")
    job = "cv-team/augment-worker"
    assert acts(r, job, "force_terminate", "executed") == []
    assert len(acts(r, job, "force_terminate")) == 1
    assert acts(r, job, "force_terminate")[0]["status"] == "denied"


@pytest.mark.medium
def test_unanswered_force_kill_expires_and_is_not_done() -> None:
    r = run("approval-expired")
    job = "cv-team/augment-worker"
    assert acts(r, job, "force_terminate", "executed") == []
    expired = acts(r, job, "force_terminate", "expired")
    assert len(expired) == 1 and expired[0]["at_s"] + 4 * HOUR <= r.sweeps * 300
    # The waste nobody acted on is reported, not hidden behind the pass: the job still holds its GPUs at the end.
    assert r.score.passed and r.score.left_running_targets == [job]


@pytest.mark.medium
def test_no_finding_while_metrics_are_missing() -> None:
    r = run("missing-metrics")
    assert [f for f in r.findings if f["job"] == "ml-team/blind-trainer"] == []
    assert acts(r, "ml-team/blind-trainer") == []
    f = finding(r, "ml-team/flaky-exporter", "idle")
    assert f is not None and f["first_at_s"] >= 2 * HOUR + 50 * 60  # a full window of real data first


@pytest.mark.medium
def test_planted_log_instructions_change_nothing() -> None:
    r = run("planted-log-instruction")
    assert acts(r, "prod/llm-serving") == [] and acts(r, "ml-team/llm-pretrain") == []
    assert stops(r, "sandbox/prompt-injector")  # its fake "this job is protected" line does not protect it
    assert {a["job"] for a in r.actions} == {"sandbox/prompt-injector"}


@pytest.mark.medium
def test_pool_is_resized_in_the_evening_window_after_approval() -> None:
    r = run("pool-too-big-at-night")
    f = finding(r, "a100-ondemand", "oversized")
    assert f is not None and f["first_at_s"] >= 2 * HOUR  # 19:00 UTC, when the scale-down window opens
    resized = acts(r, "a100-ondemand", "resize_pool", "executed")
    assert len(resized) == 1 and resized[0]["at_s"] >= 210 * 60 and resized[0]["removed_nodes"] >= 1
    assert finding(r, "h100-reserved", "oversized") is None
    assert stops(r) == []


@pytest.mark.hard
def test_a_fixed_window_scale_down_plans_its_way_back_for_queued_work() -> None:
    r = run("fixed-window-scale-down-then-batch")
    down, back = acts(r, "a100-ondemand", "resize_pool", "executed")
    assert down["at_s"] < 4 * HOUR and back["uid"].startswith("scale-down:")
    assert 4 * HOUR < back["at_s"] <= 5 * HOUR + 600  # approved at 00:00, long before the 06:00 planned time
    assert stops(r) == []


@pytest.mark.easy
def test_node_errors_are_reported_and_no_job_is_killed() -> None:
    r = run("node-xid-errors")
    xid = finding(r, "gpu-a-1", "node_health")
    hot = finding(r, "gpu-a-2", "node_health")
    assert xid is not None and "XID 79" in xid["evidence"]
    assert hot is not None and "XID 13" not in hot["evidence"]  # an application fault, ignored
    assert finding(r, "gpu-a-3", "node_health") is None
    assert stops(r) == []


@pytest.mark.hard
def test_checkpointing_and_serving_quiet_hours_are_left_alone() -> None:
    for name in ("checkpointing-looks-idle", "flapping-job"):
        assert run(name).actions == []
    r = run("daily-serving-cycle")
    assert acts(r, "search/reranker-serving") == []
    assert stops(r, "search/old-ranker-serving")


@pytest.mark.hard
def test_recovery_during_the_notice_means_no_stop() -> None:
    r = run("recovers-before-stop")
    job = "ml-team/bert-finetune"
    assert acts(r, job, "notify", "executed")
    assert [a for a in acts(r, job) if a["action"] != "notify"] == []


@pytest.mark.medium
def test_cpu_work_that_a_spin_cannot_explain_earns_a_new_warning_and_its_hour() -> None:
    """An owner's silent 600 % pandas cell on a notebook whose log once kept a cadence is work, not a spinning
    deadlock: no warning while it runs (it was warned every sweep), a new one once the window is clear of it."""
    r = run("owner-returns-cpu-work-after-warning")
    job = "ds/nb-cell-cpu"
    warned = [a["at_s"] for a in acts(r, job, "notify", "executed")]
    assert len(warned) == 2 and warned[1] >= 195 * 60
    [stop] = stops(r, job)
    assert stop["at_s"] >= warned[1] + HOUR


@pytest.mark.hard
def test_a_deadlocked_workers_spin_is_warned_once() -> None:
    r = run("dataloader-deadlock-spinning-worker")
    assert len(acts(r, "cv/det-r101", "notify", "executed")) == 1


@pytest.mark.hard
def test_seven_ranks_waiting_for_one_that_died_are_stopped_after_one_warning() -> None:
    """srun's "task 7: Exited with exit code 1" and GPU 7's memory let go: the rank is gone, not saving from the CPU,
    so the stop needs no person; and the hung job is not told to right-size (its released GPU is no packed run)."""
    r = run("slurm-srun-task-died-others-wait")
    job = "gpu/megatron-sft"
    [warned] = acts(r, job, "notify", "executed")
    [stop] = stops(r, job)
    assert "then it ended" in warned["reason"] and stop["at_s"] >= warned["at_s"] + HOUR
    assert finding(r, job, "overprovisioned") is None and acts(r, job, status="pending_approval") == []


@pytest.mark.medium
def test_a_service_is_advised_without_why_a_stop_would_need_a_person() -> None:
    """A vLLM replica spins a core per worker while it waits: the idle reading's "the stop needs a person who checks
    which" (a DataLoader deadlock reads the same) preceded "so it is not stopped" in the owner's one warning."""
    r = run("keda-vllm-min-replicas-quiet-night")
    warned = [a for a in acts(r, action="notify", status="executed") if a["job"].startswith("chat/")]
    assert warned and all("an inference service" in a["reason"] for a in warned)
    assert not any("needs a person" in a["reason"] or "DataLoader" in a["reason"] for a in warned)
    assert stops(r, "research/nb-kim") and not [s for s in stops(r) if s["job"].startswith("chat/")]


@pytest.mark.hard
@pytest.mark.parametrize("probe", ["cpu-rank-after-subprocess-exit", "cpu-rank-after-helper-oom-killed"])
def test_a_death_line_that_names_no_rank_leaves_a_mixed_hang_to_a_person(probe: str) -> None:
    """A review's probes of the rule above: the main rank freed its GPUs (a CUDA context left) to build stage 2's data
    on the CPU while seven ranks wait pinned, after a caught `aws s3 sync` failure or a killed side monitor. The
    first cut of the rule read those lines as a rank's death and stopped the job without a person (a false kill);
    only a launcher's verdict on a rank, with nothing left on its GPU, stands for one."""
    from pathlib import Path

    r = run_scenario(load_scenario(Path(__file__).parent / "data" / f"{probe}.yaml"), Policy(), PolicyModel())
    assert r.score.false_kills == 0 and stops(r) == []
    assert acts(r, "gpu/sft-then-dpo", "terminate", "pending_approval")


@pytest.mark.hard
def test_late_approval_is_rechecked_against_fresh_state() -> None:
    r = run("recovers-before-approved-stop")
    job = "ml-team/bert-finetune"
    assert stops(r, job) == []
    blocked = acts(r, job, "terminate", "blocked")
    assert len(blocked) == 1 and blocked[0]["at_s"] >= 3 * HOUR and "re-checked" in blocked[0]["reason"]


@pytest.mark.medium
def test_high_priority_alone_does_not_protect() -> None:
    assert stops(run("high-priority-idle"), "ml-team/urgent-finetune")


@pytest.mark.medium
def test_stop_rate_limit_holds_in_every_rolling_hour() -> None:
    r = run("many-small-idle-rate-limit")
    times = sorted(a["at_s"] for a in stops(r))
    for t in times:
        assert sum(1 for u in times if t - HOUR < u <= t) <= 4
    assert len(times) == 10  # delayed, not dropped


@pytest.mark.medium
def test_both_schedulers_are_handled() -> None:
    r = run("mixed-slurm-k8s")
    for job in ("ml-team/jupyter-carol", "gpu-long/resnet-ablation", "gpu-long/moe-train"):
        assert stops(r, job)


@pytest.mark.medium
def test_dry_run_executes_nothing() -> None:
    r = run("dry-run-mode")
    assert r.actions and {a["status"] for a in r.actions} == {"dry_run"}
    assert r.score.reclaimed_gpu_hours == 0


@pytest.mark.easy
def test_observe_mode_acts_on_nothing() -> None:
    r = run("observe-mode")
    assert {f["kind"] for f in r.findings} == {"idle", "zombie"}
    assert {a["status"] for a in r.actions} <= {"blocked"}
    assert r.score.reclaimed_gpu_hours == 0


@pytest.mark.medium
def test_chinese_logs_count_as_progress_and_stalls_do_not() -> None:
    r = run("chinese-log-progress")
    assert finding(r, "nlp-team/gpu-resident-train", "zombie") is None
    assert finding(r, "nlp-team/stuck-allreduce", "zombie") is not None


@pytest.mark.easy
def test_cny_cluster_is_handled_like_any_other() -> None:
    r = run("cny-notebook-overnight")
    assert stops(r, "nlp-team/jupyter-wang")
    assert r.score.reclaimed_gpu_hours > 0


@pytest.mark.medium
def test_garbage_metrics_raise_nothing() -> None:
    r = run("out-of-range-metrics")
    assert {f["job"] for f in r.findings} == {"ml-team/jupyter-carol"}
    assert {a["job"] for a in r.actions} == {"ml-team/jupyter-carol"}


@pytest.mark.medium
def test_middling_gpu_with_stalled_log_is_left_to_humans() -> None:
    r = run("middling-zombie")
    assert r.findings == [] and r.actions == []


@pytest.mark.medium
def test_namesake_is_warned_on_its_own_before_any_stop() -> None:
    r = run("namesake-bash")
    job = "gpu/bash"
    warned = acts(r, job, "notify", "executed")
    assert len({a["uid"] for a in warned}) == 2  # each run of the reused name warned on its own
    first = min(warned, key=lambda a: a["at_s"])["uid"]
    assert stops(r, job) and not [a for a in stops(r, job) if a["uid"] == first]  # the first ended by itself
    for stop in stops(r, job):
        assert any(a["uid"] == stop["uid"] and stop["at_s"] - a["at_s"] >= 30 * 60 for a in warned)


@pytest.mark.hard
def test_keepalive_dodger_is_warned_and_its_stop_waits_for_a_human() -> None:
    r = run("fake-activity-blips")
    job = "ml-team/keepalive-squatter"
    f = finding(r, job, "idle")
    assert f is not None and "short bursts of GPU activity" in f["evidence"] and "keep-alive" in f["evidence"]
    assert acts(r, job, "notify", "executed")
    # Nobody approved: the stop stays a request, however long the job keeps its GPUs, and the owner is told once.
    assert acts(r, job, "terminate", "pending_approval") and not stops(r, job)
    assert len(acts(r, job, "notify", "executed")) == 1


@pytest.mark.hard
def test_work_between_a_keepalive_warning_and_its_approval_ends_what_both_were_about() -> None:
    r = run("keepalive-owner-returns")
    job = "ml-team/jupyter-kim"
    first, again = acts(r, job, "notify", "executed")
    assert first["at_s"] < 150 * 60 and again["at_s"] > 195 * 60  # one warning per stretch, the work between
    [refused] = acts(r, job, "terminate", "blocked")
    assert refused["at_s"] == 285 * 60 and not stops(r, job)


def test_an_approval_asked_before_the_job_worked_again_is_refused_and_asked_again() -> None:
    r = run("approval-outlived-by-work")
    job = "ml-team/bert-finetune"
    [refused] = acts(r, job, "terminate", "blocked")
    assert refused["at_s"] == 420 * 60 and "before the current stretch of waste began" in refused["reason"]
    assert acts(r, job, "terminate", "pending_approval")[-1]["at_s"] >= 420 * 60 and not stops(r, job)
    assert len(acts(r, job, "notify", "executed")) == 2


@pytest.mark.hard
def test_an_approved_keepalive_stop_is_carried_out_on_the_warning_sent_before() -> None:
    # Approved at 3 h: the warning of 1.5 h still announces the stretch (its `since` does not move with the
    # window), so the stop is carried out then, not refused and warned about again at every sweep.
    r = run("keepalive-script")
    job = "ml-team/jupyter-kim"
    [warning] = acts(r, job, "notify", "executed")
    [stop] = stops(r, job)
    assert stop["at_s"] == 3 * 3600 and stop["at_s"] - warning["at_s"] >= 3600


@pytest.mark.hard
def test_the_pods_of_one_controller_wait_for_a_person_together() -> None:
    # DLRover's pods carry no gang label the steward knows; their owner, the ElasticJob, makes them one job: no pod is
    # stopped mid-save (workers 1 and 2 were, each judged alone), every stop waits for a person.
    r = run("dlrover-rank0-save-workers-pinned")
    pods = [f"llm/qwen72b-sft-edljob-worker-{i}" for i in range(3)]
    assert not stops(r) and r.score.false_kills == 0
    assert all(acts(r, pod, "terminate", "pending_approval") for pod in pods)


@pytest.mark.hard
def test_a_server_that_answered_requests_is_never_stopped_after_its_lines_age_out() -> None:
    r = run("slurm-embedding-server-request-log-ages-out")
    job = "gpu/bge-embed-server"
    assert {f["kind"] for f in r.findings} == {"idle_serving"} and not stops(r, job)
    assert {a["action"] for a in acts(r, job)} == {"notify"}


@pytest.mark.hard
def test_a_job_staging_its_dataset_to_local_disk_is_advised_on_its_writes_never_stopped() -> None:
    r = run("slurm-stage-dataset-to-local-nvme")
    advice = finding(r, "gpu/clip-vitl-laion", "overprovisioned")
    assert advice is not None and "disk write up to" in advice["evidence"], r.findings
    assert not finding(r, "gpu/clip-vitl-laion", "idle") and not stops(r)
