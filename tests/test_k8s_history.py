"""Finished-job history on Kubernetes (the doomed-job check, docs/doomed-jobs.md): ended GPU pods read with one
list call through the real kubernetes client against the loopback fake API, what they ran (image, command) and how
their main container ended (the kubelet's terminated state), and a queued pod of the same image and command is
judged doomed from them. A pod's image also feeds change governance (new images)."""

from __future__ import annotations

from datetime import timedelta

from agent.config.policy import Policy
from agent.detectors.doomed import DoomedJobDetector
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
