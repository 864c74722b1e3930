"""Inference services that sit idle: advice (scale to zero, share the GPU), never a stop.

A model server idle for hours is still a promise to its callers: stopping it turns the next request into an
outage or a cold start. Its idle, keep-alive or hung (zombie) finding becomes `idle_serving`, a level-1 finding that
no stop can cite (only idle, zombie and crash_loop justify one: the guardrail's no_finding rule), with the advice that
fits: scale to zero between uses, with the warm-up each cold start costs (the job's `steward.io/warmup`
annotation when set, else unknown), or share the GPU (a MIG slice or time-slicing) when it must stay up.
Which jobs are services is the policy's `detectors.serving.selectors` (labels the common serving stacks set), or
the request metrics a job serves (vLLM's request counter, read into its I/O series as `requests_per_s`), or its log
showing it answering requests. That last is remembered for the job's life (its uid, in the audit log: kind `served`,
agent/graph/nodes/detect.py): what a job has shown itself to be does not expire while it lives, so a server stays
one after its request lines leave the 5-hour log read (a Slurm embedding server called each morning and by a
nightly cron was stopped in the afternoon, its owner first told "not stopped", then "stopped in an hour").

Where the request rate is known the advice says how many requests the idle window saw ("no requests in the last
2h", "12 requests in the last 2h"), and a service still answering at least one request a minute on average is
not idle at all, however quiet its GPU looks: its finding is dropped (docs/alerts.md, service layer).

A service's GPUs that read busy with no work behind them (a zombie finding) are a hung server or one that spins while
it waits (multi-node SGLang reads 100 % with no requests, sgl-project/sglang#6085): either way a stop would be an
outage the steward chose, so it is advice too, naming both readings and a restart through its own deployment.
"""

from __future__ import annotations

from datetime import UTC, datetime

from agent.config.policy import ServingRule
from core.actions import Finding
from core.cluster import JobInfo, JobIoSeries
from core.durations import format_duration, parse_duration
from core.observation import Observation

WARMUP_ANNOTATION = "steward.io/warmup"
FLOWING_RPS = 1 / 60  # a service answering one request a minute or more (on average) is in use, not idle
SERVING_KINDS = ("idle", "zombie")  # the findings a stop can cite that, on a service, become advice instead


# Controllers that start another pod in an evicted one's place. A Kubeflow notebook's StatefulSet is not here: its pod
# reads as owned by the Notebook (tools/k8s_pods.owner_kind), which the steward stops as Kubeflow's culler does.
# A NodeSet is Slinky's slurm-operator's (CoreWeave's SUNK alike): each pod is one slurmd, a Slurm node that holds
# the node's GPUs for Slurm's jobs; it idles when Slurm's queue does, and deleting it removes a node Slurm may be
# placing a job on.
REPLACED_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "NodeSet")
_REPLACER = {"Deployment": "its ReplicaSet starts a fresh one", "ReplicaSet": "its ReplicaSet starts a fresh one",
             "StatefulSet": "its StatefulSet starts it again under the same name",
             "DaemonSet": "its DaemonSet starts it again on the same node",
             "NodeSet": "its NodeSet starts the Slurm node again"}


def replaced_by_controller(job: JobInfo) -> bool:
    """A pod whose controller keeps a replica count (a Deployment's ReplicaSet, a StatefulSet) starts another in its
    place: a stop frees nothing, the replacement takes the GPU back, and whatever runs behind it restarts (a service
    cold, a training run from its last checkpoint)."""
    return job.owner_kind in REPLACED_KINDS


def serving_command(command: str | None, entries: list[str]) -> str | None:
    """The entry of `entries` whose words appear in a row in `command`, the first compared by its last path
    component (`/opt/bin/tritonserver`, `python -m vllm.entrypoints.openai.api_server`); None when none does."""
    if not command:
        return None
    words = [w.strip("\"'") for w in command.split()]  # `bash -c "vllm serve ..."`: the quote is no part of the name
    names = [w.rpartition("/")[2] for w in words]
    for entry in entries:
        want = entry.split()
        if not want:
            continue
        for i, name in enumerate(names):
            if name == want[0] and words[i + 1 : i + len(want)] == want[1:]:
                return entry
    return None


def serving_reason(job: JobInfo, rule: ServingRule) -> str | None:
    """Which selector marks `job` as an inference service ("key=value" or "key" present), or its model server's
    image, or the model server its command starts; None when none does."""
    for selector in rule.selectors:
        key, _, value = selector.partition("=")
        have = job.labels.get(key)
        if have is not None and (not value or have == value):
            return selector
    if job.image:
        path = job.image.split("@", 1)[0]
        name, _, tag = path.rpartition(":")
        repo = (name if name and "/" not in tag else path).lower()
        for image in (i.lower() for i in rule.images):
            if (repo.startswith(image) if "/" in image else repo.rpartition("/")[2] == image):
                return f"image {job.image}"
    entry = serving_command(job.command, rule.commands)
    return f"runs `{entry}`" if entry is not None else None


def warmup_s(job: JobInfo) -> float | None:
    raw = job.annotations.get(WARMUP_ANNOTATION)
    if not raw:
        return None
    try:
        return parse_duration(raw)
    except ValueError:
        return None


def requests_since(io: JobIoSeries | None, since: datetime, at: datetime) -> tuple[float, float] | None:
    """(requests the job answered, over how many seconds) from `since` to `at`, as far back as its I/O series
    reaches (slices that overlap the span); None when its request rate is unknown."""
    if io is None or not io.requests_per_s:
        return None
    n = len(io.requests_per_s)
    start = (at - since).total_seconds()
    window = [rate for j, rate in enumerate(io.requests_per_s) if (n - 1 - j) * io.slice_s < start - 1e-6]
    known = [rate for rate in window if rate is not None]
    return (sum(known) * io.slice_s, min(start, len(window) * io.slice_s)) if known else None


def requests_text(requests: float, window_s: float) -> str:
    n = round(requests)
    return (f"no requests in the last {format_duration(window_s)}" if n == 0
            else f"{n} request{'s' if n != 1 else ''} in the last {format_duration(window_s)}")


def as_serving_advice(findings: list[Finding], obs: Observation, rule: ServingRule) -> list[Finding]:
    """Idle findings on inference services, turned into `idle_serving` advice (dropped while requests flow);
    every other finding as it was."""
    if not rule.enabled:
        return findings
    jobs = obs.jobs_by_id()
    io = obs.io_by_job()
    out = []
    for f in findings:
        job = jobs.get(f.target) if f.target_type == "job" and f.kind in SERVING_KINDS else None
        seen_requests = requests_since(io.get(f.target), f.since, obs.at) if job is not None else None
        why = serving_reason(job, rule) if job is not None else None
        if why is None and seen_requests is not None:
            why = "serves vLLM request metrics"
        logs = obs.logs.get(f.target)
        if why is None and job is not None and logs is not None and logs.requests:
            why = f"its log shows it answering requests ({logs.requests} in the log read, e.g. {logs.request_path})"
            if logs.failed_requests:
                why += (f"; {'every one' if logs.failed_requests == logs.requests else logs.failed_requests} "
                        f"answered with a server error (HTTP 5xx), served nothing: if its callers see those errors "
                        f"it is broken; restart it through its own deployment")
        before = obs.answered.get(f.target) if job is not None else None
        if why is None and before is not None:
            # What a job has shown itself to be does not expire while it lives: its request lines left the log read
            # (5 hours back), not its callers (a nightly cron, tomorrow morning's users).
            why = (f"its log showed it answering requests at {before.at:%Y-%m-%d %H:%M} UTC ({before.requests} in "
                   f"that read, e.g. {before.request_path}): a server that has answered requests stays one while "
                   f"it runs")
        if why is None and job is not None and replaced_by_controller(job):
            why = (f"a pod of a {job.owner_kind}, which starts another in its place: evicting it frees no GPU and "
                   f"restarts whatever it serves")
        if job is None or why is None:
            out.append(f)
            continue
        requests, window_s = seen_requests if seen_requests is not None else (None, 0.0)
        if requests is not None and window_s > 0 and requests / window_s >= FLOWING_RPS:
            continue  # requests flowing: in use, whatever the GPU reads
        warm = warmup_s(job)
        warm_text = (f"each cold start costs about {format_duration(warm)} of warm-up" if warm is not None
                     else f"warm-up per cold start unknown (set the {WARMUP_ANNOTATION} annotation)")
        seen = f"; {requests_text(requests, window_s)}" if requests is not None else ""
        hung = f.kind == "zombie"
        replaced = why.startswith("a pod of a ")
        if replaced:
            advice = (f"not stopped ({why}{seen}): "
                      + (f"if it is hung, delete the pod ({_REPLACER[job.owner_kind or 'Deployment']}) or restart the "
                         f"{job.owner_kind}; if it only spins while it waits, " if hung else "")
                      + f"scale the {job.owner_kind} down, to zero between uses ({warm_text})")
        else:
            advice = (f"an inference service ({why}{seen}): its callers expect it to answer, so it is not stopped. "
                      + ("If its callers see errors or time-outs it is hung: restart it through its own deployment; "
                         "if it only spins while it waits for requests, " if hung else "")
                      + f"{'s' if hung else 'S'}cale it to zero between uses ({warm_text}), or share the GPU (a MIG "
                      f"slice or time-slicing) if it must stay up")
        failed = logs.failed_requests if logs is not None and why.startswith("its log") else 0
        metrics = (f.metrics | {"serving": 1.0} | ({"serving_pinned": 1.0} if hung else {})
                   | ({"replaced_by_controller": 1.0 + REPLACED_KINDS.index(job.owner_kind or "Deployment")}
                      if replaced else {})
                   | ({"answered_before": before.at.timestamp()} if before is not None and why.startswith(
                       "its log showed") else {})
                   | ({"log_requests": float(logs.requests), "failed_requests": float(failed)}
                      if logs is not None and failed else {})
                   | ({"warmup_s": warm} if warm is not None else {})
                   | ({"requests": float(round(requests)), "requests_window_s": window_s} if requests is not None
                      else {}))
        evidence = f.evidence
        for doubt in (f.stop_needs_approval or "").split("; "):  # why a stop would need a person: none is made
            evidence = evidence.replace(f"; {doubt}", "") if doubt else evidence
        out.append(f.model_copy(update={"kind": "idle_serving", "evidence": f"{evidence}; {advice}",
                                        "metrics": metrics, "stop_after": None, "stop_needs_approval": None,
                                        "stop_needs_approval_zh": None}))
    return out


def serving_zh(f: Finding, idle_zh: str) -> str:
    warm = f.metrics.get("warmup_s")
    from agent.detectors.evidence import duration_zh

    warm_text = (f"每次冷启动约需 {duration_zh(warm)} 预热" if warm is not None
                 else f"冷启动预热时间未知，可设置 {WARMUP_ANNOTATION} 注解")
    requests, window_s = f.metrics.get("requests"), f.metrics.get("requests_window_s")
    seen = ""
    if requests is not None and window_s is not None:
        seen = (f"（最近 {duration_zh(window_s)}内没有请求）" if requests == 0
                else f"（最近 {duration_zh(window_s)}内 {requests:.0f} 个请求）")
    hung = "若调用方遇到报错或超时，说明服务已卡住，请通过其自身的部署重启；若只是在等待请求时空转，" if f.metrics.get(
        "serving_pinned") else "建议"
    failed, logged = f.metrics.get("failed_requests"), f.metrics.get("log_requests")
    if failed:
        every = "全部" if failed == logged else f"{failed:.0f} 个"
        seen += (f"（日志中的 {logged:.0f} 个请求{every}以服务器错误返回（HTTP 5xx），没有真正服务调用方：若调用方看到这些错误，"
                 f"说明服务已损坏，请通过其自身的部署重启）")
    if (answered := f.metrics.get("answered_before")) is not None:
        when = datetime.fromtimestamp(answered, UTC)
        seen += f"（其日志在 {when:%Y-%m-%d %H:%M} UTC 显示它响应过请求：作业存续期间始终视为服务）"
    if replaced := f.metrics.get("replaced_by_controller"):
        kind = REPLACED_KINDS[min(len(REPLACED_KINDS), max(1, round(replaced))) - 1]
        again = {"StatefulSet": "其 StatefulSet 会以同一名称重新启动它", "DaemonSet": "其 DaemonSet 会在同一节点上重新启动它",
                 "NodeSet": "其 NodeSet 会重新启动这个 Slurm 节点"}.get(kind, "其 ReplicaSet 会启动一个新的")
        restart = (f"若它已卡住，可删除该 Pod（{again}）或重启其控制器；若只是在等待请求时空转，"
                   if f.metrics.get("serving_pinned") else "")
        owner = kind if kind in ("StatefulSet", "DaemonSet", "NodeSet") else "Deployment/ReplicaSet"
        return (f"{idle_zh}；这是由控制器（{owner}）管理的 Pod{seen}：驱逐后控制器会立即启动新的 Pod 占回 GPU，"
                f"停止它也无法释放资源，因此不会停止。{restart}请缩减其副本数，空闲时缩容到零（{warm_text}）")
    return (f"{idle_zh}；这是推理服务{seen}，调用方依赖其随时响应，因此不会停止。{hung}在空闲时缩容到零（{warm_text}），"
            f"若必须常驻，可与其他服务共享 GPU（MIG 切片或时间片共享）")
