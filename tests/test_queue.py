"""The queue view: pending reasons from Kubernetes, Slurm and the simulator; stuck-pending and blocked-queue
findings; fragmentation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from agent.config.policy import Policy, parse_policy
from agent.detectors.engine import run_detectors
from agent.detectors.evidence import describe
from agent.detectors.gang import gang_of
from agent.detectors.queue import CAUSE_QUOTA, CAUSE_REFUSED, StuckPendingDetector, mark_blockers, queue_view
from agent.planning.policy_model import PolicyModel
from core.actions import Finding
from core.cluster import JobInfo, NodeInfo, PoolInfo, gpu_model_matches
from core.observation import Observation
from evals.runner import run_scenario
from evals.suite import SCENARIO_DIR
from sim.cluster import SimCluster
from sim.scenario import load_scenario
from tests.zh_text import leftovers
from tools.k8s_pods import PodReading, pod_to_job
from tools.slurm_parse import SEP, jobs_from_json, jobs_from_text

AT = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def _job(id_: str, gpus: int, state: str = "running", node: str | None = "n0", **kw: object) -> JobInfo:
    ns, name = id_.split("/")
    return JobInfo(id=id_, scheduler=kw.pop("scheduler", "kubernetes"), namespace=ns, name=name,  # type: ignore[arg-type]
                   user=str(kw.pop("user", "u")), gpus=gpus, node=node, state=state, **kw)  # type: ignore[arg-type]


def _obs(jobs: list[JobInfo], nodes: list[NodeInfo]) -> Observation:
    return Observation(at=AT, slice_s=60, lookback_s=3600, jobs=jobs, nodes=nodes,
                       pools=[PoolInfo(name="a100", gpu_model="A100-80GB", gpus_per_node=8, nodes=len(nodes))])


def test_gpu_model_matching_is_by_whole_words() -> None:
    assert gpu_model_matches("H100", "NVIDIA-H100-80GB-HBM3")
    assert gpu_model_matches("a100", "A100-80GB")
    assert gpu_model_matches(None, "A100-80GB")
    assert not gpu_model_matches("H100", "A100-80GB")
    assert not gpu_model_matches("A10", "A100-80GB")


def test_kubernetes_pending_pod_reads_podscheduled_reason_and_model() -> None:
    pod = {
        "metadata": {"name": "big", "namespace": "vision", "uid": "u1", "creationTimestamp": "2026-11-02T10:00:00Z"},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "16"}}}],
                 "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."}]},
    }
    job = pod_to_job(pod, PodReading())
    assert job.state == "pending" and job.gpus == 16
    assert job.pending_reason == "Unschedulable"
    assert job.pending_message == "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    assert job.submitted_at == datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    assert job.gpu_model == "NVIDIA-H100-80GB-HBM3"
    pod["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    assert pod_to_job(pod, PodReading()).pending_reason is None


def test_slurm_reason_submit_time_and_gpu_type_from_json_and_text() -> None:
    raw = {"jobs": [{"job_id": 42, "name": "big", "partition": "gpu", "user_name": "dave", "account": "vision",
                     "job_state": ["PENDING"], "state_reason": "QOSMaxGRESPerUser", "submit_time": {"set": True,
                     "number": 1_793_000_000}, "tres_per_node": "gres/gpu:a100:8", "node_count": 1}]}
    (job,) = jobs_from_json(json.dumps(raw))
    assert job.reason == "QOSMaxGRESPerUser" and job.gpu_type == "a100" and job.gpus == 8
    assert job.submitted_at == datetime.fromtimestamp(1_793_000_000, UTC)
    line = SEP.join(["43", "gpu", "erin", "vision", "normal", "PENDING", "1", "gpu:h100:2", "N/A", "", "sweep",
                     "ReqNodeNotAvail", "2026-11-02T10:00:00"])
    (text_job,) = jobs_from_text(line)
    assert text_job.reason == "ReqNodeNotAvail" and text_job.gpu_type == "h100" and text_job.submitted_at is not None
    old = SEP.join(["44", "gpu", "erin", "vision", "normal", "RUNNING", "1", "gpu:2", "N/A", "n1", "x"])
    assert jobs_from_text(old)[0].reason is None  # the 11-field output of older formats still reads


def test_simulator_derives_unschedulable_reason_and_holds_scripted_quota() -> None:
    cluster = SimCluster(load_scenario(SCENARIO_DIR / "stuck-pending-too-many-gpus.yaml"))
    cluster.advance_to(1200)
    jobs = {j.id: j for j in cluster.list_jobs()}
    big = jobs["vision/train-16gpu"]
    assert big.state == "pending" and big.pending_reason == "Unschedulable"
    assert big.pending_message == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert "didn't match Pod's node affinity/selector" in (jobs["vision/h100-sweep"].pending_message or "")
    assert jobs["ml-team/trainer-a"].pending_reason is None


def test_stuck_pending_scenario_advises_with_fix_and_leaves_the_waiting_job() -> None:
    scenario = load_scenario(SCENARIO_DIR / "stuck-pending-too-many-gpus.yaml")
    run = run_scenario(scenario, Policy(), PolicyModel())
    assert run.score.passed, run.score
    stuck = {f["job"]: f for f in run.findings if f["kind"] == "stuck_pending"}
    assert set(stuck) == {"vision/train-16gpu", "vision/h100-sweep"}
    assert "the largest node has 8" in stuck["vision/train-16gpu"]["evidence"]
    assert "request at most 8 GPUs per pod" in stuck["vision/train-16gpu"]["evidence"]
    assert "request one of: A100-80GB" in stuck["vision/h100-sweep"]["evidence"]
    notified = {a["job"] for a in run.actions if a["action"] == "notify" and a["status"] == "executed"}
    assert notified == set(stuck)
    assert not [a for a in run.actions if a["action"] in ("terminate", "force_terminate")]


def test_blocked_queue_names_who_waits_and_the_waiting_job_then_runs() -> None:
    scenario = load_scenario(SCENARIO_DIR / "blocked-queue-by-idle-notebook.yaml")
    run = run_scenario(scenario, Policy(), PolicyModel(), language="zh")
    assert run.score.passed, run.score
    (idle,) = [f for f in run.findings if f["kind"] == "idle"]
    assert "blocks the queue: vision's vision/detector-train (4 GPUs, waiting" in idle["evidence"]
    warning = next(a for a in run.actions if a["action"] == "notify" and a["status"] == "executed")
    assert warning["job"] == "ml-team/jupyter-carol"
    stop = next(a for a in run.actions if a["action"] == "terminate" and a["status"] == "executed")
    cluster = SimCluster(scenario)
    cluster.advance_to(stop["at_s"] - 60)
    assert cluster.get_job("vision/detector-train").state == "pending"  # type: ignore[union-attr]


def test_blocker_finding_moves_first_and_reads_in_chinese() -> None:
    nb = _job("ml/nb", 4, user="carol")
    waiter = _job("vision/train", 4, state="pending", node=None, project="vision", pending_reason="Unschedulable",
                  submitted_at=AT - timedelta(minutes=40))
    obs = _obs([_job("ml/busy", 4), nb, waiter], [NodeInfo(name="n0", pool="a100", gpus=8, gpu_model="A100-80GB")])
    from agent.detectors.queue import mark_blockers
    from core.actions import Finding
    other = Finding(kind="overprovisioned", target="ml/busy", since=AT, detected_at=AT, evidence="x")
    idle = Finding(kind="idle", target="ml/nb", since=AT - timedelta(hours=1), detected_at=AT, evidence="idle 1h",
                   gpus=4)
    marked = mark_blockers([other, idle], obs)
    assert [f.target for f in marked] == ["ml/nb", "ml/busy"]
    assert marked[0].metrics["blocked_jobs"] == 1 and marked[0].metrics["blocked_gpus"] == 4
    assert marked[0].metrics["blocked_wait_s"] == 2400
    assert "vision's vision/train (4 GPUs, waiting 40m, Unschedulable)" in marked[0].evidence
    assert "阻塞队列：1 个作业在等待它占用的 GPU（共 4 块）：vision 团队的 vision/train（4 块 GPU，已等待 40 分钟" in describe(marked[0].model_copy(update={"kind": "overprovisioned", "metrics": {
        **marked[0].metrics, "gpus_requested": 4, "gpus_working": 1, "working_util_pct": 10, "window_s": 3600,
        "coverage": 1.0, "gpu_util_pct_0": 50, "gpu_util_pct_1": 0, "gpu_util_pct_2": 0, "gpu_util_pct_3": 0}}), "zh")


def test_a_job_held_by_its_own_quota_or_with_room_elsewhere_is_blocked_by_nobody() -> None:
    """frank waits on his QOS quota, and another node has 8 free GPUs: carol's idle notebook blocks neither him nor
    a pod that fits the free node (queue.md: it may miss a blocker, never invent one)."""
    from agent.detectors.queue import mark_blockers
    from core.actions import Finding

    nodes = [NodeInfo(name="n0", pool="a100", gpus=8, gpu_model="A100-80GB"),
             NodeInfo(name="n1", pool="a100", gpus=8, gpu_model="A100-80GB")]
    nb = _job("ml/nb", 4, user="carol", node="n0")
    busy = _job("ml/busy", 4, node="n0")
    idle = Finding(kind="idle", target="ml/nb", since=AT, detected_at=AT, evidence="idle", gpus=4)
    quota = _job("gpu/frank", 8, state="pending", node=None, scheduler="slurm", user="frank",
                 pending_reason="QOSMaxGRESPerUser", submitted_at=AT - timedelta(hours=1))
    fits = _job("vision/train", 4, state="pending", node=None, pending_reason="Unschedulable",
                submitted_at=AT - timedelta(hours=1))
    assert mark_blockers([idle], _obs([busy, nb, quota, fits], nodes)) == [idle]
    # n1 full: the pod now waits for capacity, and freeing carol's 4 GPUs on n0 makes room for it.
    full = [busy, nb, fits, _job("ml/other", 8, node="n1")]
    assert mark_blockers([idle], _obs(full, nodes))[0].metrics["blocked_jobs"] == 1


def test_waiting_job_that_would_not_fit_even_after_the_stop_blocks_nobody() -> None:
    nb = _job("ml/nb", 2, user="carol")
    waiter = _job("vision/train", 8, state="pending", node=None, submitted_at=AT - timedelta(hours=1))
    obs = _obs([_job("ml/busy", 4), nb, waiter], [NodeInfo(name="n0", pool="a100", gpus=8, gpu_model="A100-80GB")])
    from agent.detectors.queue import mark_blockers
    from core.actions import Finding
    idle = Finding(kind="idle", target="ml/nb", since=AT, detected_at=AT, evidence="idle", gpus=2)
    assert mark_blockers([idle], obs) == [idle]


def test_slurm_user_quota_is_stuck_only_when_the_user_runs_nothing_else() -> None:
    nodes = [NodeInfo(name=f"n{i}", pool="a100", gpus=8, gpu_model="A100-80GB") for i in range(2)]
    waiting = _job("gpu/big", 8, state="pending", node=None, scheduler="slurm", user="dave",
                   pending_reason="QOSMaxGRESPerUser", submitted_at=AT - timedelta(hours=2))
    detector = StuckPendingDetector(Policy())
    (f,) = detector.detect(_obs([waiting], nodes))
    assert f.kind == "stuck_pending" and f.metrics["cause"] == CAUSE_QUOTA
    assert "QOSMaxGRESPerUser" in f.evidence and "fix: request fewer GPUs" in f.evidence
    zh = describe(f, "zh")
    assert zh.startswith("已排队 2 小时，按当前申请永远无法调度") and "调度器原因：QOSMaxGRESPerUser" in zh
    running = _job("gpu/other", 4, scheduler="slurm", user="dave")
    assert detector.detect(_obs([waiting, running], nodes)) == []  # it clears when dave's other job ends
    fresh = waiting.model_copy(update={"submitted_at": AT - timedelta(minutes=2)})
    assert detector.detect(_obs([fresh], nodes)) == []  # too new to judge


def test_a_dependency_that_can_never_be_met_is_stuck() -> None:
    """afterok on a job that failed: Slurm keeps the job queued for ever (DependencyNeverSatisfied); a plain
    Dependency reason may still clear and is left alone."""
    from agent.detectors.queue import CAUSE_DEPENDENCY

    nodes = [NodeInfo(name="n0", pool="a100", gpus=8, gpu_model="A100-80GB")]
    never = _job("gpu/postproc", 1, state="pending", node=None, scheduler="slurm", user="erin",
                 pending_reason="DependencyNeverSatisfied", submitted_at=AT - timedelta(hours=3))
    (f,) = StuckPendingDetector(Policy()).detect(_obs([never], nodes))
    assert f.metrics["cause"] == CAUSE_DEPENDENCY and "fix or rerun the job it depends on" in f.evidence
    assert "它所依赖的作业" in describe(f, "zh")
    waiting = never.model_copy(update={"pending_reason": "Dependency"})
    assert StuckPendingDetector(Policy()).detect(_obs([waiting], nodes)) == []


def test_queue_view_counts_fragmented_gpus() -> None:
    nodes = [NodeInfo(name=f"n{i}", pool="a100", gpus=8, gpu_model="A100-80GB") for i in range(3)]
    jobs = [_job(f"ml/busy{i}", 5, node=f"n{i}") for i in range(3)]  # 3 free on every node
    jobs.append(_job("vision/eight", 8, state="pending", node=None, submitted_at=AT - timedelta(hours=1),
                     project="vision", pending_reason="Unschedulable"))
    obs = _obs(jobs, nodes)
    view = queue_view(obs, run_detectors(obs, Policy()))
    assert view.free_gpus == 9 and view.fragmented_gpus == 9 and view.fragmented_jobs == ["vision/eight"]
    assert view.wait_s_by_team == {"vision": 3600.0} and view.reasons == {"Unschedulable": 1}
    jobs[-1] = jobs[-1].model_copy(update={"gpus": 3})
    assert queue_view(_obs(jobs, nodes)).fragmented_gpus == 0  # a 3-GPU job fits anywhere


TAINTED = ("0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: 0/3 nodes "
           "are available: 3 Preemption is not helpful for scheduling.")
SELECTOR = ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are "
            "available: 3 Preemption is not helpful for scheduling.")


def _a100(n: int = 3) -> list[NodeInfo]:
    return [NodeInfo(name=f"n{i}", pool="a100", gpus=8, gpu_model="A100-80GB") for i in range(n)]


def test_a_pod_every_node_refuses_for_a_taint_or_a_selector_is_stuck_with_the_schedulers_reason() -> None:
    """The scheduler's own message says why (k8s-device-plugin#421, aibrix#909): a pod without the toleration for the
    GPU nodes' taint, or whose nodeSelector names a label no node has, is refused everywhere, for ever. Before, the
    message was quoted but never read, so neither was stuck."""
    from agent.detectors.queue import CAUSE_REFUSED

    erin = _job("speech/erin", 4, state="pending", node=None, user="erin", pending_reason="Unschedulable",
                pending_message=TAINTED, submitted_at=AT - timedelta(minutes=20))
    frank = _job("vision/frank", 2, state="pending", node=None, user="frank", pending_reason="Unschedulable",
                 pending_message=SELECTOR, submitted_at=AT - timedelta(minutes=20))
    found = {f.target: f for f in StuckPendingDetector(Policy()).detect(_obs([erin, frank], _a100()))}
    assert set(found) == {"speech/erin", "vision/frank"}
    assert found["speech/erin"].metrics["cause"] == CAUSE_REFUSED
    assert "a taint it does not tolerate (nvidia.com/gpu)" in found["speech/erin"].evidence
    assert "tolerations: {key: nvidia.com/gpu, operator: Exists}" in found["speech/erin"].evidence
    assert "untolerated taint {nvidia.com/gpu: present}" in found["speech/erin"].evidence  # the scheduler's words
    assert "nodeSelector or node affinity to labels the GPU nodes carry" in found["vision/frank"].evidence
    zh = describe(found["speech/erin"], "zh")
    assert "不容忍节点的污点（nvidia.com/gpu）" in zh and "为 Pod 添加对 nvidia.com/gpu 的容忍" in zh
    assert "节点选择器或节点亲和性与任何节点都不匹配" in describe(found["vision/frank"], "zh")
    # Its selector admits the H100 nodes and a team's taint refuses them: no selector "no node matches", and the
    # toleration is the pod's choice, not the fix (a probe: "add a toleration for another team's dedicated taint").
    mixed = ("0/5 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 3 node(s) had untolerated "
             "taint {dedicated: inference}. preemption: 0/5 nodes are available: 5 Preemption is not helpful.")
    gina = _job("research/gina", 1, state="pending", node=None, user="gina", pending_reason="Unschedulable",
                pending_message=mixed, submitted_at=AT - timedelta(minutes=20))
    [f] = StuckPendingDetector(Policy()).detect(_obs([gina], _a100(5)))
    assert "no node matches" not in f.evidence and "on the nodes its node selector or affinity admits" in f.evidence
    assert "if it is meant to run on those nodes, add a toleration" in f.evidence
    assert "if not, point its nodeSelector or node affinity at GPU nodes without that taint" in f.evidence
    zh = describe(f, "zh")
    assert "这些节点正是其节点选择器或亲和性所允许的" in zh and "与任何节点都不匹配" not in zh and "若它本应运行在这些节点上" in zh


def test_a_pod_whose_volume_is_bound_where_no_node_is_is_stuck_with_how_to_move_it() -> None:
    """A notebook whose PVC was bound to a zonal disk in another zone than the GPU nodes (odh-manifests#259,
    kubernetes#108096): "volume node affinity conflict" on every node, for ever. Before, not read: never stuck.
    Beside a lack of GPUs on some nodes it may still run: not stuck."""
    from agent.detectors.queue import CAUSE_REFUSED

    def pod(message: str) -> JobInfo:
        return _job("ml/jupyter-ana", 1, state="pending", node=None, user="ana", pending_reason="Unschedulable",
                    pending_message=message, submitted_at=AT - timedelta(minutes=30))

    detector = StuckPendingDetector(Policy())
    zone = ("0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
            "3 node(s) had volume node affinity conflict. preemption: 0/4 nodes are available: 4 Preemption is not "
            "helpful for scheduling.")
    (f,) = detector.detect(_obs([pod(zone)], _a100()))
    assert f.metrics["cause"] == CAUSE_REFUSED and "volume node affinity" in f.evidence
    assert "spec.nodeAffinity" in f.evidence.split("; fix:")[1] and "toleration" not in f.evidence.split("; fix:")[1]
    zh = describe(f, "zh")
    assert "持久卷绑定在它不能运行的节点上" in zh and "WaitForFirstConsumer" in zh
    assert leftovers(zh.split("调度器原因")[0]) == [] and leftovers(zh.split("处理办法")[1]) == []
    mixed = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had volume node affinity conflict."
    assert detector.detect(_obs([pod(mixed)], _a100())) == []


def test_a_pod_refused_for_resources_a_passing_taint_or_with_an_empty_pool_to_grow_is_not_stuck() -> None:
    def pod(message: str) -> JobInfo:
        return _job("speech/erin", 4, state="pending", node=None, pending_reason="Unschedulable",
                    pending_message=message, submitted_at=AT - timedelta(hours=1))

    detector = StuckPendingDetector(Policy())
    mixed = ("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
             "affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod.")
    not_ready = "0/3 nodes are available: 3 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."
    cordoned = "0/3 nodes are available: 3 node(s) were unschedulable."
    for message in (mixed, not_ready, cordoned, "pod group is not ready, 1 Running, 3 minAvailable"):
        assert detector.detect(_obs([pod(message)], _a100())) == [], message
    # A pool with no node now, that could hold it and may grow, might bring a node that accepts it.
    obs = _obs([pod(SELECTOR)], _a100())
    empty = PoolInfo(name="a10g", gpu_model="A10G", gpus_per_node=4, nodes=0, max_nodes=4)
    assert detector.detect(obs.model_copy(update={"pools": [*obs.pools, empty]})) == []
    # The control plane's taint refuses, and is never advised as a toleration.
    plane = ("0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
             "3 node(s) didn't match Pod's node affinity/selector.")
    (f,) = detector.detect(_obs([pod(plane)], _a100()))
    assert "toleration" not in f.evidence.split("; fix:")[1] and "nodeSelector" in f.evidence


def test_a_pod_only_an_empty_pool_could_hold_is_stuck_once_the_pool_has_not_grown_for_a_lead() -> None:
    """An A10G pod, the A10G node group at 0 of max 4 (an autoscaler that cannot scale it from zero, kubernetes#64411):
    its room to grow is capacity while a scale-up could land (scale_up_lead, 1 h), not after. Before, never stuck."""
    from agent.detectors.queue import CAUSE_NOT_GROWN, demand_for_pool

    pools = [PoolInfo(name="a100", gpu_model="A100-80GB", gpus_per_node=8, nodes=3, max_nodes=3),
             PoolInfo(name="a10g", gpu_model="NVIDIA-A10G", gpus_per_node=1, nodes=0, max_nodes=4)]

    def obs(waited: timedelta) -> Observation:
        ivy = _job("cv/ivy", 1, state="pending", node=None, user="ivy", gpu_model="A10G",
                   pending_reason="Unschedulable", submitted_at=AT - waited,
                   pending_message="0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.")
        return _obs([ivy], _a100()).model_copy(update={"pools": pools})

    detector = StuckPendingDetector(Policy())
    assert detector.detect(obs(timedelta(minutes=50))) == []
    (f,) = detector.detect(obs(timedelta(hours=4)))
    assert f.metrics["cause"] == CAUSE_NOT_GROWN
    assert "pool(s) a10g (0 of max 4 nodes) added none in the 4h it has waited" in f.evidence
    assert "scale the pool up from zero" in f.evidence and "request a GPU model that has nodes (A100-80GB)" in f.evidence
    zh = describe(f, "zh")
    assert "a10g（0 个节点，上限 4）" in zh and "已等待的 4 小时" in zh and "（A100-80GB）" in zh
    # The pool's growing is what would let it run: it stays demand for that pool.
    late = obs(timedelta(hours=4))
    assert demand_for_pool(late.jobs[0], pools[1], late)
    # A longer lead in the policy waits longer.
    slow = StuckPendingDetector(parse_policy({"detectors": {"pools": {"scale_up_lead": "6h"}}}))
    assert slow.detect(obs(timedelta(hours=4))) == []


def test_bad_constraints_is_stuck_with_a_fix_for_the_constraint_not_the_limits() -> None:
    from agent.detectors.queue import CAUSE_CONSTRAINT

    nodes = [NodeInfo(name="n0", pool="a100", gpus=8, gpu_model="A100-80GB")]
    typo = _job("gpu/h100-typo", 4, state="pending", node=None, scheduler="slurm", user="erin",
                pending_reason="BadConstraints", submitted_at=AT - timedelta(hours=1))
    (f,) = StuckPendingDetector(Policy()).detect(_obs([typo], nodes))
    assert f.metrics["cause"] == CAUSE_CONSTRAINT and "fix --constraint" in f.evidence
    assert "QOS limits" not in f.evidence
    zh = describe(f, "zh")
    assert "--constraint" in zh and "配额" not in zh and not leftovers(zh, {"BadConstraints", "GRES"})


def test_demand_for_a_pool_is_a_job_that_waits_for_capacity_its_nodes_could_give() -> None:
    from agent.detectors.queue import demand_for_pool

    obs = _obs([], _a100(2))
    pool = obs.pools[0]
    since = AT - timedelta(hours=1)

    def pending(gpus: int, reason: str | None = None, scheduler: str = "kubernetes", **kw: object) -> JobInfo:
        return _job("t/j", gpus, state="pending", node=None, scheduler=scheduler, pending_reason=reason,
                    submitted_at=since, **kw)

    assert demand_for_pool(pending(8, "Unschedulable"), pool, obs)
    assert demand_for_pool(pending(16, "Resources", scheduler="slurm"), pool, obs)  # a Slurm job spans nodes
    assert not demand_for_pool(pending(16, "Unschedulable"), pool, obs)  # one pod larger than any node
    assert not demand_for_pool(pending(8, "SchedulingGated"), pool, obs)  # Kueue's quota gate
    for reason in ("QOSGrpGRES", "AssocGrpGRES", "Dependency", "JobHeldUser", "Reservation",
                   # a floating license, nodes down or reserved for maintenance, an array's own %N throttle: no node
                   # bought would start them (a license wait once bought 16 on-demand GPUs for the night)
                   "Licenses", "ReqNodeNotAvail, Reserved for maintenance", "JobArrayTaskLimit"):
        assert not demand_for_pool(pending(8, reason, scheduler="slurm"), pool, obs), reason
    # Nodes down or drained and the job too big for those up: more nodes may start it (a review).
    assert demand_for_pool(pending(8, "ReqNodeNotAvail, UnavailableNodes:a1", scheduler="slurm"), pool, obs)
    assert demand_for_pool(pending(8, "BeginTime", scheduler="slurm"), pool, obs)  # a start already set
    assert not demand_for_pool(pending(8, "Unschedulable", pending_message=TAINTED), pool, obs)
    assert not demand_for_pool(pending(8, "Unschedulable", gpu_model="H100"), pool, obs)


def test_an_idle_gang_pod_does_not_block_its_own_pending_sibling() -> None:
    """An MPIJob's worker-0 runs sshd on 8 GPUs while worker-1 and the launcher wait (kubeflow/trainer#1617): worker-0
    does not "block the queue" for worker-1, its own job's pod; the finding says the job cannot run while they wait.
    Another team's pod that fits its GPUs is still blocked by it."""
    from agent.detectors.queue import mark_blockers
    from core.actions import Finding

    gang = {"training.kubeflow.org/job-name": "hvd-resnet"}
    worker0 = _job("hpc/hvd-resnet-worker-0", 8, node="n0", labels=gang)
    worker1 = _job("hpc/hvd-resnet-worker-1", 8, state="pending", node=None, labels=gang,
                   pending_reason="Unschedulable", submitted_at=AT - timedelta(hours=1))
    launcher = _job("hpc/hvd-resnet-launcher", 0, state="pending", node=None, labels=gang,
                    pending_reason="Unschedulable", submitted_at=AT - timedelta(hours=1))
    idle = Finding(kind="idle", target=worker0.id, since=AT - timedelta(hours=1), detected_at=AT, evidence="idle 1h",
                   gpus=8)
    nodes = [NodeInfo(name="n0", pool="a100", gpus=8, gpu_model="A100-80GB")]
    (f,) = mark_blockers([idle], _obs([worker0, worker1, launcher], nodes))
    assert "blocks the queue" not in f.evidence and "blocked_jobs" not in f.metrics
    assert ("2 pods of its own distributed job are pending: hpc/hvd-resnet-launcher (0 GPUs, waiting 1h, "
            "Unschedulable), hpc/hvd-resnet-worker-1 (8 GPUs, waiting 1h, Unschedulable), so the job cannot run until "
            "they are placed") in f.evidence
    assert f.metrics["gang_pending"] == 2
    from agent.detectors.queue import blocked_zh
    assert blocked_zh(f) == ("；它所属分布式作业的 2 个 Pod 仍在排队：hpc/hvd-resnet-launcher（0 块 GPU，已等待 1 小时, "
                             "Unschedulable）、hpc/hvd-resnet-worker-1（8 块 GPU，已等待 1 小时, Unschedulable），"
                             "在其被调度之前该作业无法运行")
    other = _job("vision/train", 8, state="pending", node=None, project="vision", pending_reason="Unschedulable",
                 submitted_at=AT - timedelta(minutes=40))
    (f,) = mark_blockers([idle], _obs([worker0, worker1, other], nodes))
    assert f.metrics["blocked_jobs"] == 1 and "blocks the queue: vision's vision/train" in f.evidence
    assert f.evidence.index("of its own distributed job") < f.evidence.index("blocks the queue")


_ELASTIC_OWNER = {"owner_kind": "ElasticJob", "owner_name": "qwen72b-sft", "owner_uid": "u-1"}


def test_an_idle_owner_grouped_worker_does_not_block_its_own_pending_sibling() -> None:
    """Pods grouped by their controller (DLRover's ElasticJob, no gang label) are one job for the queue too (review,
    eleventh round: the idle worker was said to block its own pending sibling)."""
    worker0 = _job("llm/qwen72b-sft-edljob-worker-0", 8, node="n0", **_ELASTIC_OWNER)
    worker1 = _job("llm/qwen72b-sft-edljob-worker-1", 8, state="pending", node=None, pending_reason="Unschedulable",
                   submitted_at=AT - timedelta(hours=1), **_ELASTIC_OWNER)
    assert gang_of(worker0) == gang_of(worker1) is not None  # the gang detector's one job
    idle = Finding(kind="idle", target=worker0.id, since=AT - timedelta(hours=1), detected_at=AT, evidence="idle 1h",
                   gpus=8)
    nodes = [NodeInfo(name="n0", pool="a100", gpus=8, gpu_model="A100-80GB")]
    (f,) = mark_blockers([idle], _obs([worker0, worker1], nodes))
    assert "blocks the queue" not in f.evidence, f.evidence
    assert f.metrics.get("gang_pending") == 1


def _volume_pod(message: str) -> JobInfo:
    return _job("ml/jupyter-ana", 1, state="pending", node=None, user="ana", pending_reason="Unschedulable",
                pending_message=message, submitted_at=AT - timedelta(minutes=30))


def test_volume_zone_plugin_wording_is_read_too() -> None:
    """The scheduler's VolumeZone plugin (in-tree zone labels on the PV, e.g. older EBS / GCE PD volumes) refuses a
    node with "node(s) had no available volume zone" (pkg/scheduler/framework/plugins/volumezone ErrReasonConflict):
    the same never-clearing refusal as VolumeBinding's "volume node affinity conflict", but not recognised."""
    msg = ("0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
           "3 node(s) had no available volume zone. preemption: 0/4 nodes are available: 4 Preemption is not "
           "helpful for scheduling.")
    found = StuckPendingDetector(Policy()).detect(_obs([_volume_pod(msg)], _a100()))
    assert [f.metrics["cause"] for f in found] == [CAUSE_REFUSED]


def test_fix_does_not_tell_the_owner_to_recreate_a_volume_without_keeping_its_data() -> None:
    """A notebook's PVC holds the user's work: "recreate the volume" (English and Chinese) with no word of copying
    it first (a snapshot restored in the GPU nodes' zone) invites data loss."""
    msg = "0/3 nodes are available: 3 node(s) had volume node affinity conflict."
    (f,) = StuckPendingDetector(Policy()).detect(_obs([_volume_pod(msg)], _a100()))
    fix = f.evidence.split("; fix:")[1].lower()
    assert "snapshot" in fix or "copy" in fix
    zh = describe(f, "zh").split("处理办法")[1]
    assert "快照" in zh or "复制" in zh or "拷贝" in zh


def test_a_multi_zone_pool_that_can_still_grow_may_bring_a_node_in_the_volumes_zone() -> None:
    """Judgment call: 'a pool's new nodes are copies of its nodes' holds for taints and labels, not for zones. A pool
    spread over zones (EKS managed node group over several subnets, a GKE multi-zone pool) with room to grow can add
    a node in the PV's zone; a GPU node takes 5-10 min to join, and the advice comes at 5 min saying it 'can never
    be scheduled' and to recreate the volume."""
    msg = "0/2 nodes are available: 2 node(s) had volume node affinity conflict."
    pod = _job("ml/jupyter-ana", 1, state="pending", node=None, user="ana", pending_reason="Unschedulable",
               pending_message=msg, submitted_at=AT - timedelta(minutes=6))
    nodes = _a100(2)
    obs = Observation(at=AT, slice_s=60, lookback_s=3600, jobs=[pod], nodes=nodes,
                      pools=[PoolInfo(name="a100", gpu_model="A100-80GB", gpus_per_node=8, nodes=2, max_nodes=6)])
    assert StuckPendingDetector(Policy()).detect(obs) == []
