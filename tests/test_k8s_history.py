"""Finished-job history on Kubernetes (the doomed-job check, docs/doomed-jobs.md): ended GPU pods read with one
list call through the real kubernetes client against the loopback fake API, what they ran (image, command) and how
their main container ended (the kubelet's terminated state), and a queued pod of the same image and command is
judged doomed from them. A pod's image also feeds change governance (new images)."""

from __future__ import annotations

from datetime import timedelta

from agent.config.policy import Policy
from agent.detectors.doomed import DoomedJobDetector
from agent.detectors.evidence import describe
from agent.history.doomed import infrastructure_end
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.observation import Observation
from evals.suite import SCENARIO_DIR
from sim.scenario import load_scenario
from tests.k8s_fake_cluster import gpu_pod
from tests.test_kubernetes_adapter import NOW, api, settings  # noqa: F401  (fixtures)
from tools.kubernetes import kubernetes_scheduler_from_settings

IMAGE = "registry.local/llm/train:2.3"
COMMAND = ["torchrun", "--nproc_per_node=4", "train.py"]


def _run(name: str, *, ended_min_ago: float, ran_s: float, phase: str = "Failed", reason: str = "OOMKilled",
         code: int = 137, user: str = "carol") -> dict:
    pod = gpu_pod("llm", name, 4, labels={"steward.io/owner": user}, phase="Running",
                  started=NOW - timedelta(minutes=ended_min_ago, seconds=ran_s))
    pod["spec"]["containers"][0] |= {"image": IMAGE, "command": COMMAND[:1], "args": COMMAND[1:]}
    end = NOW - timedelta(minutes=ended_min_ago)
    terminated = {"exitCode": code if phase == "Failed" else 0, "reason": reason if phase == "Failed" else "Completed",
                  "startedAt": (end - timedelta(seconds=ran_s)).isoformat().replace("+00:00", "Z"),
                  "finishedAt": end.isoformat().replace("+00:00", "Z")}
    pod["status"] |= {"phase": phase, "containerStatuses": [{"name": "main", "state": {"terminated": terminated}}]}
    return pod


def test_ended_gpu_pods_are_the_history_and_a_queued_rerun_is_doomed(api, settings):  # noqa: F811
    for i, ago in enumerate((50, 35, 20)):
        api.store.put("pods", _run(f"train-{i}", ended_min_ago=ago, ran_s=140))
    api.store.put("pods", _run("old", ended_min_ago=60 * 24 * 9, ran_s=140))  # older than the history asked for
    api.store.put("pods", _run("fine", ended_min_ago=10, ran_s=7200, phase="Succeeded", user="dave"))
    queued = gpu_pod("llm", "train-3", 4, phase="Pending", labels={"steward.io/owner": "carol"})
    queued["spec"]["containers"][0] |= {"image": IMAGE, "command": COMMAND[:1], "args": COMMAND[1:]}
    api.store.put("pods", queued)

    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    calls = k8s.api_calls
    finished = k8s.list_finished(NOW - timedelta(days=7))
    assert k8s.api_calls == calls + 1  # one list call, whatever the history's size
    (_, _, query), = [c for c in api.calls("GET", "/pods") if "Running" in c[2]["fieldSelector"][0]]
    assert query["fieldSelector"] == ["status.phase!=Running,status.phase!=Pending,status.phase!=Unknown"]
    assert [f.id for f in finished] == ["llm/train-0", "llm/train-1", "llm/train-2", "llm/fine"]  # oldest end first
    first = finished[0]
    assert (first.state, first.reason, first.image, first.command, first.gpus, first.user) == (
        "failed", "OOMKilled (exit 137)", IMAGE, "torchrun --nproc_per_node=4 train.py", 4, "carol")
    assert first.ended_at - first.started_at == timedelta(seconds=140)
    assert finished[-1].state == "completed" and finished[-1].reason == ""
    assert "llm/old" not in {f.id for f in finished}

    jobs = k8s.list_jobs()
    rerun = next(j for j in jobs if j.id == "llm/train-3")
    assert rerun.image == IMAGE and rerun.command == "torchrun --nproc_per_node=4 train.py"
    obs = Observation(at=NOW, slice_s=300, lookback_s=3600, jobs=jobs, finished=finished)
    [doomed] = DoomedJobDetector(Policy()).detect(obs)
    assert doomed.target == "llm/train-3" and doomed.kind == "doomed"
    assert "the last 3 runs of image registry.local/llm/train:2.3" in doomed.evidence
    assert "OOMKilled (exit 137)" in doomed.evidence


def test_a_pod_without_a_reported_end_is_left_out(api, settings):  # noqa: F811
    pod = _run("lost", ended_min_ago=5, ran_s=60)
    pod["status"]["containerStatuses"] = []  # evicted before the kubelet reported its container
    api.store.put("pods", pod)
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    assert [f.id for f in k8s.list_finished(NOW - timedelta(days=1))] == []


def test_a_pod_ended_from_outside_is_named_for_what_ended_it_not_for_its_containers_sigkill(api, settings):  # noqa: F811
    # The kubelet evicted it (node memory pressure), then the scheduler preempted one: each container died of the
    # SIGKILL ("Error", exit 137), which on its own reads as the job's own crash and counts toward "doomed".
    evicted = _run("evicted", ended_min_ago=30, ran_s=600, reason="Error")
    evicted["status"] |= {"reason": "Evicted", "message": "The node was low on resource: memory."}
    preempted = _run("preempted", ended_min_ago=20, ran_s=600, reason="Error")
    preempted["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                          "reason": "PreemptionByScheduler"}]
    storage = _run("storage", ended_min_ago=15, ran_s=600, reason="Error")  # over its own limit: its doing
    storage["status"] |= {"reason": "Evicted", "message": "Pod ephemeral local storage usage exceeds the total "
                                                          "limit of containers 10Gi."}
    crashed = _run("crashed", ended_min_ago=10, ran_s=600)
    crashed["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "False", "reason": "x"}]
    for pod in (evicted, preempted, storage, crashed):
        api.store.put("pods", pod)
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    reasons = {f.id: f.reason for f in k8s.list_finished(NOW - timedelta(days=1))}
    assert reasons == {"llm/evicted": "Evicted: Error (exit 137)",
                       "llm/preempted": "DisruptionTarget PreemptionByScheduler: Error (exit 137)",
                       "llm/storage": "EphemeralStorageExceeded: Error (exit 137)",
                       "llm/crashed": "OOMKilled (exit 137)"}
    assert {k: infrastructure_end(r) for k, r in reasons.items()} == {
        "llm/evicted": True, "llm/preempted": True, "llm/storage": False, "llm/crashed": False}


def test_a_re_read_before_acting_reuses_its_sweeps_history():
    deps, cluster = simulated_deps(load_scenario(SCENARIO_DIR / "crash-loop-cuda-oom.yaml"), Policy(), PolicyModel())
    reads = []
    real = cluster.list_finished
    cluster.list_finished = lambda since: reads.append(since) or real(since)  # type: ignore[method-assign]
    cluster.advance_to(3600)
    obs = deps.observe()
    assert len(reads) == 1 and obs.finished
    job = obs.jobs[0]
    assert deps.observe_job(job).finished == [f for f in obs.finished if f.user == job.user]
    assert len(reads) == 1  # the sweep's own history, not another list call
    cluster.advance_to(3600 + 600)  # the next sweep, ten minutes on, reads it again
    deps.observe_job(job)
    assert len(reads) == 2


def _restarting(name: str, *, restarts: int, ran_s: float, ended_min_ago: float, waiting: str | None,
                reason: str = "OOMKilled", code: int = 137) -> dict:
    """A Running pod whose main container the kubelet restarted in place (restartPolicy Always or OnFailure):
    restartCount, the last termination, and the waiting reason while it backs off."""
    pod = gpu_pod("llm", name, 4, labels={"steward.io/owner": "carol"}, phase="Running",
                  started=NOW - timedelta(hours=2))
    end = NOW - timedelta(minutes=ended_min_ago)
    last = {"exitCode": code, "reason": reason, "startedAt": (end - timedelta(seconds=ran_s)).isoformat().replace(
        "+00:00", "Z"), "finishedAt": end.isoformat().replace("+00:00", "Z")}
    state = {"waiting": {"reason": waiting, "message": "back-off 5m0s restarting failed container"}} if waiting else {
        "running": {"startedAt": end.isoformat().replace("+00:00", "Z")}}
    pod["status"]["containerStatuses"] = [{"name": "main", "restartCount": restarts, "state": state,
                                           "lastState": {"terminated": last}}]
    return pod


def test_a_pod_crash_looping_in_place_is_doomed_advice_from_the_kubelets_own_count(api, settings):  # noqa: F811
    """A pod that restarts in place never ends, so it leaves no finished history: the kubelet's restartCount and
    last termination are the streak. Only the fast, recent loop is flagged; nothing is stopped (level 1)."""
    api.store.put("pods", _restarting("looping", restarts=6, ran_s=150, ended_min_ago=2, waiting="CrashLoopBackOff"))
    api.store.put("pods", _restarting("rerunning", restarts=4, ran_s=140, ended_min_ago=3, waiting=None))
    # Restarted after a long healthy run (not fast), restarted long ago and running well since, restarted twice.
    api.store.put("pods", _restarting("slow-fail", restarts=5, ran_s=3 * 3600, ended_min_ago=2, waiting="CrashLoopBackOff"))
    api.store.put("pods", _restarting("recovered", restarts=5, ran_s=120, ended_min_ago=90, waiting=None))
    api.store.put("pods", _restarting("twice", restarts=2, ran_s=120, ended_min_ago=2, waiting="CrashLoopBackOff"))
    k8s = kubernetes_scheduler_from_settings(settings, clock=api.clock)
    jobs = k8s.list_jobs()
    looping = next(j for j in jobs if j.id == "llm/looping")
    assert (looping.state, looping.restarts, looping.last_exit, looping.last_run_s, looping.waiting) == (
        "running", 6, "OOMKilled (exit 137)", 150.0, "CrashLoopBackOff")
    obs = Observation(at=NOW, slice_s=300, lookback_s=3600, jobs=jobs, finished=[])
    findings = DoomedJobDetector(Policy()).detect(obs)
    assert sorted(f.target for f in findings) == ["llm/looping", "llm/rerunning"]
    loop = next(f for f in findings if f.target == "llm/looping")
    assert loop.kind == "doomed" and loop.gpus == 4
    assert ("restarted 6 times; the last run lasted 2m and ended 2m ago with OOMKilled (exit 137)" in loop.evidence
            and "(CrashLoopBackOff)" in loop.evidence), loop.evidence
    zh = describe(loop, "zh")
    assert "已重启 6 次" in zh and "OOMKilled (exit 137)" in zh and "CrashLoopBackOff" in zh and "4 块 GPU" in zh, zh
