"""Fault injection for the sweep's other backends: the Slurm controller down (the real Slurm CLIs), cloud throttling
on a pool resize (Cluster API over the loopback Kubernetes API; AWS over moto), and the model endpoint slow or
malformed (the real ChatOpenAI against the loopback OpenAI server). Nothing is stopped or resized on a failed read,
nothing is done twice, every outcome is said, and the sweep goes on.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.config.policy import Policy
from agent.graph.report import render_report
from agent.graph.service import SweepService
from agent.guardrail.case import Case
from agent.guardrail.decide import Facts, decide
from agent.guardrail.limit_rules import duplicate_rule
from agent.planning.llm_planner import LLMPlanner
from agent.planning.policy_model import PolicyModel
from agent.wiring import simulated_deps
from core.actions import History, ProposedAction
from core.cluster import JobInfo, NodeInfo
from sim.scenario import load_scenario
from tests.conftest import free_port, require_binary, require_module
from tests.k8s_fake_api import FakeKubernetesApi, Fault
from tests.k8s_fake_cluster import capi_pool, gpu_pod
from tests.openai_loopback import OpenAILoopback, Reply
from tests.test_model_bounds import IDLE, SCENARIO, settings_for
from tools.capi import DELETE_MACHINE, MIN_SIZE, STEWARD_MARK, ClusterApiPools
from tools.kubernetes import KubernetesScheduler
from tools.slurm import SlurmScheduler
from tools.slurm_cli import SlurmCli
from tools.slurm_parse import SlurmQueryError, jobs_from_json

# -- Slurm: the controller is down ---------------------------------------------------------------------------------

DEAD_CONTROLLER = """\
ClusterName=steward-faults
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={port}
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
MessageTimeout=1
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 Gres=gpu:8 State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture
def dead_slurm(tmp_path) -> SlurmScheduler:
    """The real squeue/scontrol/scancel pointed at a cluster whose slurmctld does not answer."""
    require_binary("squeue")
    conf = tmp_path / "slurm.conf"
    conf.write_text(DEAD_CONTROLLER.format(port=free_port(), root=tmp_path))
    return SlurmScheduler(SlurmCli(env={**os.environ, "SLURM_CONF": str(conf)}))


def test_slurm_controller_down_sweep_stops_nothing_and_says_so(dead_slurm):
    deps, cluster = simulated_deps(load_scenario(SCENARIO), Policy(), PolicyModel())
    cluster.advance_to(150 * 60)  # the notebook is idle and its owner would be warned
    deps.scheduler = deps.logs = dead_slurm
    result = SweepService(deps).sweep()
    [reason] = result.state["observed"]["degraded"]
    assert reason.startswith("cluster not read: scheduler unavailable: "), reason
    assert "slurm" in reason.lower() and "controller" in reason.lower()  # Slurm's own words: who did not answer
    assert result.state["findings"] == [] and result.state.get("outcomes", []) == []
    assert not deps.notifier.sent and not [c for c in dead_slurm.calls if c[0] == "scancel"]
    assert f"degraded: {reason}" in result.report
    assert dead_slurm.output == "auto"  # a controller that is down is no reason to give up on JSON output


def test_slurm_controller_down_is_never_an_empty_cluster_or_a_gone_job(dead_slurm):
    # Slurm 22.05's `squeue --json` exits 0 with "jobs": [] when it cannot reach slurmctld: not "no jobs".
    with pytest.raises(SlurmQueryError, match="slurm_load_jobs"):
        jobs_from_json('{"errors": [{"error_number": -1, "error": "Unspecified error", '
                       '"description": "Failed while looking for jobs", "source": "slurm_load_jobs"}], "jobs": []}')
    with pytest.raises(Exception, match="(?i)controller|slurm_load_jobs"):
        dead_slurm.get_job("gpu/train")  # not None: None would read as "the job finished"
    with pytest.raises(Exception, match="(?i)controller|slurm_load_jobs"):
        dead_slurm.stop_job("gpu/train", force=False, grace_s=30, uid="slurm:42")  # not "already_gone"
    assert not [c for c in dead_slurm.calls if c[0] == "scancel"]


# -- cloud throttling on a pool resize ------------------------------------------------------------------------------

START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
THROTTLED = Fault("PATCH", "/machinedeployments/a100-md/scale", 429, "TooManyRequests",
                  "Too many requests, please try again later.")


@pytest.fixture
def capi():
    api = FakeKubernetesApi().start()
    nodes = capi_pool(api.store, "capi", "a100-md", 4, 8, start=START, annotations={MIN_SIZE: "1"})
    api.store.put("pods", gpu_pod("ml", "train", 8, node=nodes[1]))
    yield api
    api.stop()


def _capi_pools(api: FakeKubernetesApi, tmp_path: Path) -> ClusterApiPools:
    from kubernetes import client

    from agent.config.settings import Settings
    from tests.k8s_fake_cluster import kubeconfig
    from tools.kubernetes import kubernetes_api_client

    api_client = kubernetes_api_client(Settings(kubeconfig=kubeconfig(api, tmp_path)))
    scheduler = KubernetesScheduler(client.CoreV1Api(api_client), request_timeout_s=0.3)
    return ClusterApiPools(client.CustomObjectsApi(api_client), scheduler)


def _marked(api: FakeKubernetesApi) -> list[str]:
    return [m["metadata"]["name"] for m in api.store.list("machines", "capi")
            if DELETE_MACHINE in (m["metadata"].get("annotations") or {})]


def _replicas(api: FakeKubernetesApi) -> int:
    return api.store.get("machinedeployments", "capi", "a100-md")["spec"]["replicas"]


def test_a_throttled_capi_scale_down_takes_its_marks_back_and_is_done_once_later(capi, tmp_path):
    pools = _capi_pools(capi, tmp_path)
    capi.inject(THROTTLED)
    throttled = pools.resize_pool("a100-md", 2, reason="empty overnight")
    assert throttled.status == "error" and "HTTP 429" in throttled.detail and "not resized" in throttled.detail
    assert "marks taken back" in throttled.detail
    assert _marked(capi) == [] and _replicas(capi) == 4 and len(capi.store.list("nodes")) == 4
    done = pools.resize_pool("a100-md", 2, reason="empty overnight")
    assert done.status == "resized" and _replicas(capi) == 2 and len(capi.store.list("nodes")) == 2
    assert pools.resize_pool("a100-md", 2, reason="empty overnight").status == "unchanged"
    assert len(capi.calls("PATCH", "/scale")) == 2  # the throttled one and the one that took effect


def test_a_capi_scale_whose_answer_is_lost_is_reported_as_done(capi, tmp_path):
    pools = _capi_pools(capi, tmp_path)
    capi.inject(Fault("PATCH", "/machinedeployments/a100-md/scale", 504, "Timeout", "no answer", hang_s=2,
                      applied=True))
    result = pools.resize_pool("a100-md", 2, reason="empty overnight")
    assert result.status == "resized" and "took effect" in result.detail and (result.nodes_after == 2)
    assert _replicas(capi) == 2 and _marked(capi) == []  # the controller removed exactly the marked machines
    assert pools.resize_pool("a100-md", 2, reason="x").status == "unchanged"


def _a_job_lands_on(api: FakeKubernetesApi, machine: str) -> str:
    node = next(m["status"]["nodeRef"]["name"] for m in api.store.list("machines", "capi")
                if m["metadata"]["name"] == machine)
    api.store.put("pods", gpu_pod("ml", "new-train", 8, node=node))
    return node


def _someone_scales_to(api: FakeKubernetesApi, replicas: int) -> None:
    """The cluster autoscaler or a person shrinking the MachineDeployment: CAPI removes marked Machines first."""
    api.store.patch("machinedeployments", "capi", "a100-md", {"spec": {"replicas": replicas}}, "merge")
    api.store.reconcile_machinedeployment("capi", "a100-md")


def _alive(api: FakeKubernetesApi, node: str) -> bool:
    return any(n["metadata"]["name"] == node for n in api.store.list("nodes"))


def test_a_capi_mark_refused_midway_takes_back_the_marks_set_before_it(capi, tmp_path):
    pools = _capi_pools(capi, tmp_path)
    # chosen newest first (m3, m2): m3 is marked, the PATCH marking m2 answers 500
    capi.inject(Fault("PATCH", "/machines/a100-md-m2", 500))
    result = pools.resize_pool("a100-md", 2, reason="empty overnight")
    assert result.status == "error" and "HTTP 500" in result.detail and "not resized" in result.detail
    assert _marked(capi) == [] and _replicas(capi) == 4 and not capi.calls("PATCH", "/scale")
    node = _a_job_lands_on(capi, "a100-md-m3")
    _someone_scales_to(capi, 3)
    assert _alive(capi, node)  # no stale mark made the autoscaler's scale-down remove the new job's node


def test_a_capi_mark_whose_answer_is_lost_is_taken_back_and_the_error_raised(capi, tmp_path):
    pools = _capi_pools(capi, tmp_path)
    # the mark on m2 is set, but no answer comes before the client's timeout: not an HTTP error
    capi.inject(Fault("PATCH", "/machines/a100-md-m2", 504, hang_s=1.0, applied=True))
    with pytest.raises(Exception) as raised:
        pools.resize_pool("a100-md", 2, reason="empty overnight")
    assert getattr(raised.value, "status", None) is None
    assert _marked(capi) == [] and _replicas(capi) == 4


def test_capi_marks_left_by_a_process_killed_before_its_scale_call_are_taken_back_at_restart(capi, tmp_path):
    from types import SimpleNamespace

    from agent.graph.execute import settle_interrupted
    from agent.records.audit import AuditLog
    from tests.fault_world import Killed, kill_at

    audit = AuditLog(":memory:")
    deps = SimpleNamespace(audit=audit, clock=SimpleNamespace(now=lambda: START), pools=_capi_pools(capi, tmp_path))
    audit.record("intent", at=START, run_id="killed-run", target="a100-md", action="resize_pool", level=2,
                 status="acting", reason="about to resize_pool a100-md",
                 data={"action_id": "a1", "gpus": 0, "target_nodes": 2, "nodes_before": 4})
    kill_at(deps.pools, "_call", when=lambda method, *a, **kw: method == "patch_namespaced_custom_object_scale")
    with pytest.raises(Killed):
        deps.pools.resize_pool("a100-md", 2, reason="empty overnight")
    assert sorted(_marked(capi)) == ["a100-md-m2", "a100-md-m3"] and _replicas(capi) == 4
    deps.pools = _capi_pools(capi, tmp_path)  # the restarted process
    # At once, the intent may be another replica's shrink between its marks and its scale call: left alone.
    assert settle_interrupted(deps, "restart-run") == [] and sorted(_marked(capi)) == ["a100-md-m2", "a100-md-m3"]
    deps.clock = SimpleNamespace(now=lambda: START + timedelta(minutes=11))  # older than any live resize
    [settled] = settle_interrupted(deps, "restart-run")
    assert settled.status == "skipped" and "did not take effect" in settled.reason
    assert "marks for removal taken off a100-md-m2, a100-md-m3" in settled.reason
    assert _marked(capi) == [] and _replicas(capi) == 4
    node = _a_job_lands_on(capi, "a100-md-m3")
    _someone_scales_to(capi, 3)
    assert _alive(capi, node)


def test_capi_release_takes_back_only_the_stewards_own_marks_and_none_during_a_scale_down(capi, tmp_path):
    pools = _capi_pools(capi, tmp_path)
    capi.store.patch("machines", "capi", "a100-md-m0", {"metadata": {"annotations": {DELETE_MACHINE: "yes"}}},
                     "merge")  # a person's mark
    capi.store.patch("machines", "capi", "a100-md-m3", {"metadata": {"annotations": {
        DELETE_MACHINE: "yes", STEWARD_MARK: "resize a100-md 4->3 at 2026-11-02T08:00:00+00:00"}}}, "merge")
    # a scale-down under way (replicas below the Machines): the marks say which Machines it removes
    capi.store.patch("machinedeployments", "capi", "a100-md", {"spec": {"replicas": 3}}, "merge")
    assert pools.release_marks("a100-md") == [] and sorted(_marked(capi)) == ["a100-md-m0", "a100-md-m3"]
    capi.store.patch("machinedeployments", "capi", "a100-md", {"spec": {"replicas": 4}}, "merge")
    assert pools.release_marks("a100-md") == ["a100-md-m3"] and _marked(capi) == ["a100-md-m0"]


def test_a_capi_shrink_is_refused_while_a_busy_machine_carries_a_delete_mark(capi, tmp_path):
    pools = _capi_pools(capi, tmp_path)  # ml/train runs on a100-md-1 (Machine m1)
    capi.store.patch("machines", "capi", "a100-md-m1", {"metadata": {"annotations": {DELETE_MACHINE: "yes"}}},
                     "merge")
    result = pools.resize_pool("a100-md", 3, reason="empty overnight")
    assert result.status == "refused" and "a100-md-1 run jobs and carry" in result.detail
    assert not capi.calls("PATCH") and _replicas(capi) == 4


def test_aws_throttling_midway_through_a_shrink_reports_what_was_done():
    boto3 = require_module("boto3")
    from botocore.stub import Stubber

    from tools.aws_pools import AwsAutoScalingPools, AwsPoolConfig

    asg = boto3.client("autoscaling", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    ids = ["i-1", "i-2", "i-3", "i-4"]
    group = {"AutoScalingGroupName": "g", "MinSize": 0, "MaxSize": 4, "DesiredCapacity": 4, "DefaultCooldown": 0,
             "AvailabilityZones": ["a"], "HealthCheckType": "EC2", "CreatedTime": "2026-01-01T00:00:00Z",
             "Instances": [{"InstanceId": i, "InstanceType": "p5.48xlarge", "AvailabilityZone": "a",
                            "LifecycleState": "InService", "HealthStatus": "Healthy", "ProtectedFromScaleIn": False}
                           for i in ids],
             "Tags": [{"Key": "steward.io/pool", "Value": "h100"}]}
    dns = {"Reservations": [{"Instances": [{"InstanceId": i, "PrivateDnsName": f"ip-10-0-0-{i[-1]}.ec2.internal"}
                                           for i in ids]}]}
    with Stubber(asg) as s_asg, Stubber(ec2) as s_ec2:
        s_asg.add_response("describe_auto_scaling_groups", {"AutoScalingGroups": [group]})
        s_ec2.add_response("describe_instances", dns)
        s_asg.add_response("terminate_instance_in_auto_scaling_group", {"Activity": {
            "ActivityId": "a1", "AutoScalingGroupName": "g", "Cause": "x", "StartTime": "2026-01-01T00:00:00Z",
            "StatusCode": "InProgress"}})
        s_asg.add_client_error("terminate_instance_in_auto_scaling_group", "Throttling", "Rate exceeded", 400)
        # The group read again after the failed call: i-4 is terminating, i-3 still in service.
        after = {**group, "Instances": [{**i, "LifecycleState": "Terminating" if i["InstanceId"] == "i-4"
                                         else "InService"} for i in group["Instances"]]}
        s_asg.add_response("describe_auto_scaling_groups", {"AutoScalingGroups": [after]})
        s_ec2.add_response("describe_instances", dns)
        nodes = [NodeInfo(name=f"ip-10-0-0-{i[-1]}", gpus=8, jobs=["a/b"] if i == "i-1" else []) for i in ids]
        pools = AwsAutoScalingPools(asg, ec2, lambda: nodes, AwsPoolConfig(reserve_fraction=0.0, max_attempts=1),
                                    sleep=lambda s: None)
        result = pools.resize_pool("h100", 2, reason="empty overnight")
        s_asg.assert_no_pending_responses()
    # The first instance went, the second was throttled: the result says 3 nodes, and which one went.
    assert (result.status, result.nodes_before, result.nodes_after) == ("error", 4, 3)
    assert result.removed_nodes == ["ip-10-0-0-4"]
    assert "terminating i-3 failed" in result.detail and "terminated i-4;" in result.detail
    assert "Throttling" in result.detail
    assert "3 nodes, not 2" in result.detail


# -- the model endpoint ------------------------------------------------------------------------------------------

def _model_sweep(base_url: str, timeout_s: float):
    planner = LLMPlanner.from_settings(settings_for(base_url).model_copy(update={"llm_timeout_s": timeout_s}))
    deps, cluster = simulated_deps(load_scenario(SCENARIO), Policy(), planner)
    cluster.advance_to(120 * 60)
    return deps, SweepService(deps).sweep()


@pytest.mark.parametrize("reply,said", [
    (Reply(text="late", delay=5), "timed out"),
    (Reply(raw=b"<html>502 bad gateway</html>"), "JSONDecodeError"),
    (Reply(raw=b'{"id": "x", "object": "chat.completion", "choices": []}'), "model unavailable"),
])
def test_a_slow_or_malformed_model_hands_the_sweep_to_the_policy_model(reply, said):
    with OpenAILoopback(lambda body, index: reply) as srv:
        deps, run = _model_sweep(srv.base_url, 0.3)
    degraded = run.state["plan"]["degraded"]
    assert degraded.startswith("model unavailable: ") and said in degraded, degraded
    assert [(p["action"], p["target"], p["proposed_by"]) for p in run.state["proposals"]] == \
        [("notify", IDLE, "policy-model")]
    assert [m.job_id for m in deps.notifier.sent] == [IDLE]  # warned, once
    assert f"! {degraded}" in run.report
    deps.language = "zh"
    assert "! 模型不可用：" in render_report(run.state, deps) and "已由内置策略模型规划" in render_report(run.state, deps)


# -- the guardrail rule the faults needed -----------------------------------------------------------------------------

def test_a_stopping_job_is_never_sent_a_second_graceful_stop():
    now = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    job = JobInfo(id="ml/nb", uid="u1", scheduler="kubernetes", namespace="ml", name="nb", user="a", gpus=2,
                  node="n1", state="stopping", stop_requested_at=datetime(2026, 11, 2, 11, 50, tzinfo=UTC))
    stop = ProposedAction(action="terminate", target="ml/nb", target_uid="u1", finding_kind="idle", reason="idle",
                          proposed_by="policy-model")
    decision = decide(stop, Facts(now=now, job=job, findings=[]), Policy(), History())
    # The finding rule speaks first when there is no finding; with or without one, no second graceful stop.
    assert decision.verdict == "deny"
    denial = duplicate_rule(Case(stop, Facts(now=now, job=job), Policy(), History(), now))
    assert denial == ("already_stopping", "job ml/nb is already stopping since 2026-11-02 11:50 UTC; "
                                          "a graceful stop is not sent twice")
    running = job.model_copy(update={"state": "running", "stop_requested_at": None})
    assert duplicate_rule(Case(stop, Facts(now=now, job=running), Policy(), History(), now)) is None


# -- a forced stop interrupted: "stopping" is not evidence it happened ------------------------------------------------

STUBBORN = {
    "version": 1, "name": "stubborn", "duration": "5h", "step": "30s",
    "pools": [{"name": "a100", "gpus_per_node": 4, "nodes": 1, "price_per_gpu_hour": 4.0}],
    "jobs": [{"id": "ml/stubborn", "user": "alice", "gpus": 2, "node": "a100-0", "sigterm": "ignores",
              "phases": [{"gpu_util": 0, "gpu_mem_gb": 10, "cpu_pct": 0.2}]}],
}


def test_a_forced_stop_killed_before_its_call_is_not_taken_for_done(tmp_path):
    from sim.scenario import parse_scenario
    from tests.fault_world import Killed, kill_at

    deps, cluster = simulated_deps(parse_scenario(STUBBORN), Policy(), PolicyModel(), data_dir=tmp_path)
    service = SweepService(deps)
    approvals = []
    for minute in range(60, 300, 10):
        cluster.advance_to(minute * 60)
        approvals = service.sweep().approvals
        if approvals:
            break
    [approval] = approvals
    assert approval.action == "force_terminate" and cluster.get_job("ml/stubborn").state == "stopping"
    real_stop = deps.scheduler.stop_job
    kill_at(deps.scheduler, "stop_job")  # dies after the intent, before the forced stop is sent
    with pytest.raises(Killed):
        service.answer(approval.id, "approve", by="bob")
    deps.scheduler.stop_job = real_stop
    cluster.advance(60)
    result = SweepService(deps).sweep()  # the next process's first sweep
    forced = [e for e in deps.audit.entries(kind="execution", target="ml/stubborn", limit=50)
              if e.action == "force_terminate"]
    assert [(e.status, e.data.get("interrupted_run")) for e in forced] == [("skipped", approval.id)]
    assert "did not take effect" in forced[0].reason and cluster.get_job("ml/stubborn").state == "stopping"
    assert "Settled after an interruption" in result.report
