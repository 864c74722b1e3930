"""Idle inference services: advice (scale to zero with its warm-up, or share the GPU), never a stop."""

from __future__ import annotations

from datetime import UTC, datetime

from agent.config.policy import Policy, parse_policy
from agent.detectors.engine import run_detectors
from agent.detectors.evidence import describe
from agent.detectors.serving import serving_reason
from agent.guardrail.decide import Facts, decide
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.actions import Finding, History, HistoryEntry, ProposedAction
from core.cluster import JobInfo
from evals.runner import run_scenario
from sim.scenario import load_scenario

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def job(**labels: str) -> JobInfo:
    return JobInfo(id="nlp/vllm-chat", scheduler="kubernetes", namespace="nlp", name="vllm-chat", user="erin",
                   gpus=2, labels=labels)


def test_which_jobs_are_services_is_the_policys_selectors():
    rule = Policy().detectors.serving
    assert serving_reason(job(**{"app.kubernetes.io/component": "inference"}), rule) == \
        "app.kubernetes.io/component=inference"
    assert serving_reason(job(**{"serving.kserve.io/inferenceservice": "chat"}), rule) == \
        "serving.kserve.io/inferenceservice"
    assert serving_reason(job(**{"app.kubernetes.io/component": "trainer"}), rule) is None
    assert serving_reason(job(app="jupyter"), rule) is None
    custom = parse_policy({"detectors": {"serving": {"selectors": ["team=inference"]}}}).detectors.serving
    assert serving_reason(job(team="inference"), custom) == "team=inference"


def test_a_model_servers_image_makes_a_service_whatever_its_labels():
    rule = Policy().detectors.serving

    def image(name: str) -> str | None:
        return serving_reason(job(app="doc-reranker").model_copy(update={"image": name}), rule)

    for served in ("nvcr.io/nvidia/tritonserver:24.08-py3", "vllm/vllm-openai:v0.6.3", "lmsysorg/sglang",
                   "localhost:5000/tritonserver", "nvcr.io/nim/meta/llama3-8b-instruct:1.0@sha256:0abc",
                   "ghcr.io/huggingface/text-generation-inference:2.4", "ghcr.io/ggml-org/llama.cpp:server-cuda",
                   "pytorch/torchserve:0.12.0-gpu"):
        assert image(served) == f"image {served}", served
    for other in ("pytorch/pytorch:2.4-cuda12", "nvcr.io/nvidia/pytorch:24.08-py3", "acme/tritonserver-trainer:1",
                  "registry:5000/team/train-vllm:latest", "harbor.corp/sglang/grpo-train:1", "nim/train:2", None):
        assert image(other) is None, other


def test_a_deployments_idle_pod_gets_advice_since_its_replicaset_would_start_another():
    """A BentoML service (Yatai's labels), a llama.cpp server and an in-house Triton build (`whisper-triton`, in no
    list) were warned at 21:00 and evicted at 22:00: three false kills, and on a real cluster three futile ones (the
    ReplicaSet starts a replacement that takes the GPU back). A Deployment's pod is advised, never stopped; the
    simulator reads the owner from `pod-template-hash` as the Kubernetes adapter does."""
    run = run_scenario(load_scenario("evals/scenarios/serving-stacks-quiet-night-mixed.yaml"), Policy(), PolicyModel())
    assert run.score.passed and run.score.false_kills == 0
    assert not [a for a in run.actions if a["action"] == "terminate"]
    [asr] = [f for f in run.findings if f["job"].startswith("asr/whisper-triton")]
    assert asr["kind"] == "idle_serving" and "a pod of a Deployment, which starts another in its place" in \
        asr["evidence"] and "scale the Deployment down" in asr["evidence"]
    deps, cluster = simulated_deps(load_scenario("evals/scenarios/serving-stacks-quiet-night-mixed.yaml"), Policy(),
                                   PolicyModel())
    cluster.advance_to(5 * 3600)
    [f] = [f for f in run_detectors(deps.observe(), Policy()) if f.target.startswith("asr/whisper-triton")]
    zh = describe(f, "zh")
    assert "由控制器（Deployment/ReplicaSet）管理的 Pod" in zh and "缩容到零" in zh, zh
    # A bare pod or a Job's is not a Deployment's: judged as before.
    rule = Policy().detectors.serving
    for kind in ("Pod", "Job", "StatefulSet", "Notebook", None):
        assert serving_reason(job(app="whisper-asr").model_copy(update={"owner_kind": kind}), rule) is None


def test_an_idle_service_gets_advice_and_is_never_stopped_while_an_idle_notebook_is():
    run = run_scenario(load_scenario("evals/scenarios/idle-inference-service.yaml"), Policy(), PolicyModel())
    assert run.score.passed and run.score.false_kills == 0
    service = [a for a in run.actions if a["job"] == "nlp/vllm-chat"]
    assert [a["action"] for a in service if a["status"] == "executed"] == ["notify"]
    [finding] = [f for f in run.findings if f["job"] == "nlp/vllm-chat"]
    assert finding["kind"] == "idle_serving"
    assert "Scale it to zero between uses (each cold start costs about 4m of warm-up)" in finding["evidence"]
    notebook = [a["action"] for a in run.actions if a["job"] == "research/notebook-frank" and a["status"] == "executed"]
    assert notebook == ["notify", "terminate"]


def test_no_stop_can_cite_an_idle_service_finding_even_warned_and_approved():
    advice = Finding(kind="idle_serving", target="nlp/vllm-chat", since=NOW, detected_at=NOW, gpus=2,
                     evidence="2 GPUs at max 0.0% util for 3h; an inference service")
    facts = Facts(now=NOW, job=job(**{"app.kubernetes.io/component": "inference"}), findings=[advice])
    warned = History(entries=[HistoryEntry(action="notify", target="nlp/vllm-chat", status="executed",
                                           at=datetime(2026, 11, 2, 10, 0, tzinfo=UTC), finding_kind="idle_serving",
                                           deadline=datetime(2026, 11, 2, 11, 0, tzinfo=UTC))])
    for action in ("terminate", "force_terminate"):
        decision = decide(ProposedAction(action=action, target="nlp/vllm-chat"), facts, Policy(), warned,
                          approved=True)
        assert decision.verdict == "deny" and decision.rule == "no_finding", decision
    notify = decide(ProposedAction(action="notify", target="nlp/vllm-chat", finding_kind="idle_serving"), facts,
                    Policy(), History())
    assert notify.verdict == "allow"


def test_the_advice_reads_in_chinese():
    deps, cluster = simulated_deps(load_scenario("evals/scenarios/idle-inference-service.yaml"), Policy(), PolicyModel())
    cluster.advance_to(3 * 3600)
    [f] = [f for f in run_detectors(deps.observe(), Policy()) if f.target == "nlp/vllm-chat"]
    assert f.kind == "idle_serving" and f.metrics["warmup_s"] == 240
    zh = describe(f, "zh")
    assert "推理服务" in zh and "缩容到零" in zh and "4 分钟" in zh and "GPU" in zh, zh


def test_a_service_that_reads_hung_gets_advice_not_a_stop():
    """sglang#6085: a two-node SGLang service's GPUs read 100 % with no requests (its all-reduce polls). The zombie
    findings are advice: a stop would be an outage the steward chose, whether it is hung or only waiting."""
    run = run_scenario(load_scenario("evals/scenarios/sglang-multinode-idle-gpu-pinned.yaml"), Policy(), PolicyModel())
    assert run.score.passed and run.score.false_kills == 0
    assert not [a for a in run.actions if a["action"] in ("terminate", "force_terminate") and a["status"] == "executed"]
    assert {f["kind"] for f in run.findings} == {"idle_serving"}
    deps, cluster = simulated_deps(load_scenario("evals/scenarios/sglang-multinode-idle-gpu-pinned.yaml"), Policy(),
                                   PolicyModel())
    cluster.advance_to(3 * 3600)
    found = [f for f in run_detectors(deps.observe(), Policy()) if f.target == "llm/deepseek-r1-0"]
    assert [f.kind for f in found] == ["idle_serving"] and found[0].metrics["serving_pinned"] == 1.0
    assert "restart it through its own deployment" in found[0].evidence
    zh = describe(found[0], "zh")
    assert "推理服务" in zh and "重启" in zh and "不会停止" in zh, zh


def test_a_deployments_pod_that_reads_hung_is_told_to_restart_not_to_scale_to_zero():
    """A reviewer: a stuck all-reduce in a Deployment's pod was told "scale the Deployment down, to zero between
    uses"; a hung pod wants a fresh one (its ReplicaSet starts it), as the advice for a labelled service says."""
    from agent.detectors.serving import as_serving_advice
    from core.observation import Observation

    pod = JobInfo(id="ml/allreduce-7d9f8-x2k4q", scheduler="kubernetes", namespace="ml", name="allreduce-7d9f8-x2k4q",
                  user="erin", gpus=8, owner_kind="Deployment")
    hung = Finding(kind="zombie", target=pod.id, since=NOW, detected_at=NOW, evidence="8 GPUs busy; likely hung",
                   gpus=8)
    obs = Observation(at=NOW, slice_s=300, lookback_s=3600, jobs=[pod])
    [f] = as_serving_advice([hung], obs, Policy().detectors.serving)
    assert f.kind == "idle_serving" and "if it is hung, delete the pod (its ReplicaSet starts a fresh one)" in f.evidence
    from agent.detectors.serving import serving_zh

    zh = serving_zh(f, "疑似挂起")
    assert "若它已卡住，可删除该 Pod" in zh and "控制器" in zh, zh


def test_a_server_that_answered_requests_stays_one_for_its_life_across_restarts(tmp_path):
    """A Slurm embedding server (no labels, no metrics: only its access log says it serves) got "a service, not
    stopped" at 125m; 5 hours after its morning's last request those lines left the log read, it read as plain
    idle, was warned "stopped in an hour" and stopped before its nightly caller. What a job has shown itself to be
    does not expire while it lives: the sweep that sees it answer records that under its uid in the audit log, and
    every later sweep, after a restart too, reads it back."""
    from agent.graph.service import SweepService
    from agent.records.audit import SERVED, AuditLog, answered_requests

    scenario = load_scenario("evals/scenarios/slurm-embedding-server-request-log-ages-out.yaml")
    server = "gpu/bge-embed-server"
    deps, cluster = simulated_deps(scenario, Policy(), PolicyModel(), data_dir=tmp_path)
    cluster.advance_to(130 * 60)
    SweepService(deps).sweep()
    [entry] = deps.audit.entries(kind=SERVED)
    uid = next(j.uid for j in deps.observe().jobs if j.id == server)
    assert (entry.target, entry.data["target_uid"], entry.data["request_path"]) == (server, uid, "POST /v1/embeddings")
    SweepService(deps).sweep()
    assert deps.audit.count(SERVED) == 1  # once per uid
    deps.audit.close()

    # A restart: new stores on the same data dir; at 7 h the log read (5 h back) holds no request line.
    deps, cluster = simulated_deps(scenario, Policy(), PolicyModel(), data_dir=tmp_path)
    cluster.advance_to(7 * 3600)
    obs = deps.observe()
    assert not obs.logs[server].requests and obs.answered[server].requests > 0
    [f] = [f for f in run_detectors(obs, Policy()) if f.target == server]
    assert f.kind == "idle_serving" and f.stop_after is None
    assert "its log showed it answering requests at 2026-11-13 02:10 UTC" in f.evidence, f.evidence
    assert "2026-11-13 02:10 UTC 显示它响应过请求" in describe(f, "zh")
    # Without the memory the same reading is plain idle, its stop due after the notice (the old behaviour).
    [plain] = [f for f in run_detectors(obs.model_copy(update={"answered": {}}), Policy()) if f.target == server]
    assert plain.kind == "idle"

    # Keyed on the uid, never the name: a namesake (a new job under the name) starts clean, and so does a job
    # whose uid an older record shares but which started after it (a scheduler that reused an id).
    job = next(j for j in obs.jobs if j.id == server)
    audit = AuditLog(tmp_path / "audit.sqlite")
    assert answered_requests(audit, [job.model_copy(update={"uid": "other"})]) == {}
    assert answered_requests(audit, [job.model_copy(update={"uid": ""})]) == {}
    assert answered_requests(audit, [job.model_copy(update={"started_at": obs.at})]) == {}
    assert set(answered_requests(audit, [job])) == {server}


def test_a_model_servers_command_makes_a_service_whatever_its_image_and_labels():
    """A team's own image built FROM vllm/vllm-openai, labelled only app=llm-gw-backend, run as `vllm serve`: a
    service (it was warned at an ordinary overnight gap and stopped 16 minutes before a tenant's request)."""
    rule = Policy().detectors.serving

    def command(text: str | None) -> str | None:
        return serving_reason(job(app="llm-gw-backend").model_copy(
            update={"image": "harbor.corp/platform/llm-gw-backend:3.1", "command": text}), rule)

    assert command("vllm serve /models/llama-3.1-70b --tensor-parallel-size 2") == "runs `vllm serve`"
    assert command("python3 -m vllm.entrypoints.openai.api_server --model m") == \
        "runs `vllm.entrypoints.openai.api_server`"
    assert command("/opt/tritonserver/bin/tritonserver --model-repository=/models") == "runs `tritonserver`"
    assert command("bash -c python -m sglang.launch_server --model-path m") == "runs `sglang.launch_server`"
    assert command('bash -c "vllm serve /models/m --port 8000"') == "runs `vllm serve`"  # a hand-written command
    for other in ("python train.py --serve", "torchrun --nproc_per_node 8 train.py", "python -m vllm_rl.trainer",
                  "/usr/bin/vllm bench throughput", "serve.sh", None, ""):
        assert command(other) is None, other


def test_a_statefulsets_idle_pod_gets_advice_since_its_statefulset_starts_it_again():
    """Evicting a StatefulSet's pod frees nothing: the StatefulSet starts it again under the same name (a service cold,
    a torchrun replica from its last checkpoint). A Kubeflow notebook's StatefulSet pod reads as its Notebook's
    (the adapter's owner_kind), which the steward stops as Kubeflow's culler does: not this case."""
    rule = Policy().detectors.serving
    sts = job(app="whisper-asr").model_copy(update={"owner_kind": "StatefulSet", "owner_name": "whisper"})
    assert serving_reason(sts, rule) is None
    obs = simulated_deps(load_scenario("evals/scenarios/idle-inference-service.yaml"), Policy(), PolicyModel())[0] \
        .observe()
    from agent.detectors.serving import as_serving_advice
    idle = Finding(kind="idle", target=sts.id, since=NOW, detected_at=NOW, evidence="idle 2h", metrics={}, gpus=2)
    obs.jobs = [sts]
    [advice] = as_serving_advice([idle], obs, rule)
    assert advice.kind == "idle_serving" and "a pod of a StatefulSet, which starts another in its place" in \
        advice.evidence and "scale the StatefulSet down" in advice.evidence
    from agent.detectors.serving import serving_zh
    zh = serving_zh(advice, "空闲 2 小时")
    assert "由控制器（StatefulSet）管理的 Pod" in zh, zh
    # A DaemonSet's pod the same (an embedding agent requesting a GPU on every node: evicted, it comes back at once).
    ds = sts.model_copy(update={"owner_kind": "DaemonSet", "owner_name": "embed-agent"})
    from core.observation import Observation
    [advice] = as_serving_advice([idle], Observation(at=NOW, slice_s=300, lookback_s=3600, jobs=[ds]), rule)
    assert advice.kind == "idle_serving" and "scale the DaemonSet down" in advice.evidence
    assert "由控制器（DaemonSet）管理的 Pod" in serving_zh(advice, "空闲 2 小时")
