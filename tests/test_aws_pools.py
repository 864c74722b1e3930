"""AwsAutoScalingPools against moto in server mode over loopback HTTP, and against throttling."""

from __future__ import annotations

import pytest

from core.cluster import NodeInfo
from tests.conftest import free_port, require_module
from tools.aws_pools import AwsAutoScalingPools, AwsPoolConfig, aws_pools_from_settings

REGION = "us-east-1"


@pytest.fixture(scope="module")
def moto_url():
    require_module("moto.server")
    require_module("boto3")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_url, monkeypatch):
    import boto3
    import requests

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    requests.post(f"{moto_url}/moto-api/reset", timeout=10)  # each test starts from an empty account
    session = boto3.session.Session(region_name=REGION)
    return moto_url, session.client("autoscaling", endpoint_url=moto_url), session.client("ec2", endpoint_url=moto_url)


def _group(aws, name: str, pool: str, size: int, *, min_size: int = 1, tags: dict[str, str] | None = None):
    _, asg, ec2 = aws
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(LaunchTemplateName=f"lt-{name}",
                               LaunchTemplateData={"ImageId": ami, "InstanceType": "p4d.24xlarge"})
    all_tags = {"steward.io/pool": pool, "steward.io/price-per-gpu-hour": "4.1", **(tags or {})}
    asg.create_auto_scaling_group(
        AutoScalingGroupName=name, MinSize=min_size, MaxSize=8, DesiredCapacity=size,
        LaunchTemplate={"LaunchTemplateName": f"lt-{name}", "Version": "$Latest"},
        AvailabilityZones=[f"{REGION}a"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": False, "ResourceId": name,
               "ResourceType": "auto-scaling-group"} for k, v in all_tags.items()])
    ids = [i["InstanceId"] for i in asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
           ["AutoScalingGroups"][0]["Instances"]]
    dns = {r["InstanceId"]: r["PrivateDnsName"] for res in ec2.describe_instances(InstanceIds=ids)["Reservations"]
           for r in res["Instances"]}
    return [dns[i] for i in sorted(ids)], dns


class Cluster:
    """The scheduler's view of the nodes: which node runs jobs."""

    def __init__(self) -> None:
        self.nodes: list[NodeInfo] = []
        self.reads = 0

    def set(self, names: list[str], busy: set[str]) -> None:
        self.nodes = [NodeInfo(name=n, gpus=8, jobs=["team/job"] if n in busy else []) for n in names]

    def __call__(self) -> list[NodeInfo]:
        self.reads += 1
        return self.nodes


def _pools(aws, cluster: Cluster, **config) -> AwsAutoScalingPools:
    _, asg, ec2 = aws
    return AwsAutoScalingPools(asg, ec2, cluster, AwsPoolConfig(**config), sleep=lambda s: None)


def test_pools_come_from_tagged_groups_with_one_cached_read(aws):
    names, _ = _group(aws, "asg-a100", "a100-ondemand", 4)
    _group(aws, "asg-untagged", "", 1)  # an empty tag value: not a pool
    cluster = Cluster()
    cluster.set(names, busy={names[0]})
    pools = _pools(aws, cluster, cache_s=300)
    [pool] = pools.list_pools()
    assert (pool.name, pool.provider, pool.gpus_per_node, pool.gpu_model) == ("a100-ondemand", "aws", 8, "A100-40GB")
    assert (pool.nodes, pool.min_nodes, pool.max_nodes, pool.busy_nodes) == (4, 1, 8, 1)
    assert pool.price_per_gpu_hour == 4.1
    calls = pools.api_calls
    pools.list_pools()
    assert pools.api_calls == calls  # inside the cache period: no AWS request


def test_scale_down_terminates_only_idle_instances_and_is_idempotent(aws):
    names, dns = _group(aws, "asg-a100", "a100-ondemand", 4)
    busy = {names[0], names[2]}
    cluster = Cluster()
    cluster.set(names, busy=busy)
    pools = _pools(aws, cluster, reserve_fraction=0.0, protect_busy=True)
    done = pools.resize_pool("a100-ondemand", 2, reason="empty overnight")
    assert (done.status, done.nodes_before, done.nodes_after) == ("resized", 4, 2)
    assert set(done.removed_nodes) == {n.split(".")[0] for n in names if n not in busy}
    _, asg, _ = aws
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["asg-a100"])["AutoScalingGroups"][0]
    left = {i["InstanceId"]: i for i in group["Instances"]}
    assert group["DesiredCapacity"] == 2
    assert {dns_name for iid, dns_name in dns.items() if iid in left} == busy
    assert all(i["ProtectedFromScaleIn"] for i in left.values())
    cluster.set([n for n in names if n in busy], busy=busy)
    again = pools.resize_pool("a100-ondemand", 2, reason="empty overnight")
    assert again.status == "unchanged" and again.removed_nodes == []


def test_refuses_below_min_size_busy_nodes_reserve_and_unknown_pools(aws):
    names, _ = _group(aws, "asg-a100", "a100-ondemand", 4, min_size=2)
    cluster = Cluster()
    cluster.set(names, busy={names[0], names[1], names[2]})
    pools = _pools(aws, cluster, reserve_fraction=0.0)
    assert pools.resize_pool("a100-ondemand", 1, reason="").status == "refused"  # MinSize 2
    busy = pools.resize_pool("a100-ondemand", 2, reason="")
    assert busy.status == "refused" and "3 instances run jobs" in busy.detail
    cluster.set(names[:3], busy=set())  # names[3] maps to no node: it might run a job, so it stays
    reserved = _pools(aws, cluster, reserve_fraction=0.3)  # 30% of 32 GPUs: 10 stay free, 2 nodes leave 8
    assert "the reserve is 10" in reserved.resize_pool("a100-ondemand", 2, reason="").detail
    assert pools.resize_pool("h100", 1, reason="").status == "error"
    _, asg, _ = aws
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["asg-a100"])["AutoScalingGroups"][0]
    assert len(group["Instances"]) == 4 and group["DesiredCapacity"] == 4


def test_unmatched_instances_count_as_busy(aws):
    names, _ = _group(aws, "asg-a100", "a100-ondemand", 3)
    cluster = Cluster()
    cluster.set(names[:1], busy=set())  # two instances are not nodes (yet): they might run jobs
    pools = _pools(aws, cluster, reserve_fraction=0.0)
    assert pools.list_pools()[0].busy_nodes == 2
    assert pools.resize_pool("a100-ondemand", 1, reason="").status == "refused"
    result = pools.resize_pool("a100-ondemand", 2, reason="")
    assert result.status == "resized" and result.removed_nodes == [names[0].split(".")[0]]


def test_throttling_is_retried_with_backoff():
    boto3 = require_module("boto3")
    from botocore.stub import Stubber

    asg = boto3.client("autoscaling", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    group = {"AutoScalingGroupName": "g", "MinSize": 0, "MaxSize": 4, "DesiredCapacity": 1, "DefaultCooldown": 0,
             "AvailabilityZones": ["a"], "HealthCheckType": "EC2", "CreatedTime": "2026-01-01T00:00:00Z",
             "Instances": [{"InstanceId": "i-1", "InstanceType": "p5.48xlarge", "AvailabilityZone": "a",
                            "LifecycleState": "InService", "HealthStatus": "Healthy",
                            "ProtectedFromScaleIn": False}],
             "Tags": [{"Key": "steward.io/pool", "Value": "h100"}]}
    waits: list[float] = []
    with Stubber(asg) as s_asg, Stubber(ec2) as s_ec2:
        s_asg.add_client_error("describe_auto_scaling_groups", "Throttling", "Rate exceeded", 400)
        s_asg.add_client_error("describe_auto_scaling_groups", "Throttling", "Rate exceeded", 400)
        s_asg.add_response("describe_auto_scaling_groups", {"AutoScalingGroups": [group]})
        s_ec2.add_response("describe_instances", {"Reservations": [{"Instances": [
            {"InstanceId": "i-1", "PrivateDnsName": "ip-10-0-0-1.ec2.internal"}]}]})
        pools = AwsAutoScalingPools(asg, ec2, lambda: [NodeInfo(name="ip-10-0-0-1", gpus=8, jobs=["a/b"])],
                                    sleep=waits.append)
        [pool] = pools.list_pools()
        s_asg.assert_no_pending_responses()
    assert (pool.name, pool.gpus_per_node, pool.gpu_model, pool.busy_nodes) == ("h100", 8, "H100-80GB", 1)
    assert len(waits) == 2 and waits[1] > waits[0] * 0.5 > 0
    assert pools.api_calls == 4


def test_other_errors_and_exhausted_retries_surface():
    boto3 = require_module("boto3")
    from botocore.exceptions import ClientError
    from botocore.stub import Stubber

    asg = boto3.client("autoscaling", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(asg) as stub:
        for _ in range(2):
            stub.add_client_error("describe_auto_scaling_groups", "Throttling", "Rate exceeded", 400)
        pools = AwsAutoScalingPools(asg, None, list, AwsPoolConfig(max_attempts=2), sleep=lambda s: None)
        with pytest.raises(ClientError, match="Throttling"):
            pools.list_pools()
        stub.add_client_error("describe_auto_scaling_groups", "AccessDenied", "no", 403)
        with pytest.raises(ClientError, match="AccessDenied"):
            pools.list_pools()


def test_factory_uses_adaptive_retries(aws):
    url, _, _ = aws
    pools = aws_pools_from_settings(None, list, AwsPoolConfig(region=REGION, endpoint_url=url))
    assert pools.asg.meta.config.retries["mode"] == "adaptive"
    assert pools.list_pools() == []


def test_a_bad_tag_is_a_clear_error():
    boto3 = require_module("boto3")
    from botocore.stub import Stubber

    asg = boto3.client("autoscaling", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    group = {"AutoScalingGroupName": "g", "MinSize": 0, "MaxSize": 4, "DesiredCapacity": 0, "DefaultCooldown": 0,
             "AvailabilityZones": ["a"], "HealthCheckType": "EC2", "CreatedTime": "2026-01-01T00:00:00Z",
             "Instances": [], "Tags": [{"Key": "steward.io/pool", "Value": "h100"},
                                       {"Key": "steward.io/gpus-per-node", "Value": "eight"}]}
    with Stubber(asg) as stub:
        stub.add_response("describe_auto_scaling_groups", {"AutoScalingGroups": [group]})
        pools = AwsAutoScalingPools(asg, None, list, sleep=lambda s: None)
        with pytest.raises(ValueError, match="group g: tag steward.io/gpus-per-node='eight' is not a number"):
            pools.list_pools()


# -- a removal is decided on every workload on the node, read right then (as agent/wiring.py wires the adapter) ----
def _wired(aws, tmp_path, backend: str, **settings):
    from agent.config.policy import Policy
    from agent.config.settings import Settings
    from agent.planning.policy_model import PolicyModel
    from agent.wiring import cluster_deps

    url, _, _ = aws
    return cluster_deps(Settings(backend=backend, pool_provider="aws", aws_region=REGION, aws_endpoint_url=url,
                                 data_dir=tmp_path, prometheus_url="http://127.0.0.1:9", **settings),
                        Policy(), PolicyModel())


def _live_ids(aws) -> set[str]:
    _, asg, _ = aws
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["asg-a100"])["AutoScalingGroups"][0]
    return {i["InstanceId"] for i in group["Instances"] if i["LifecycleState"] in ("InService", "Pending")}


@pytest.fixture
def k8s_api():
    from tests.k8s_fake_api import FakeKubernetesApi

    server = FakeKubernetesApi().start()
    yield server
    server.stop()


def _late_gpu_pod(node: str) -> dict:
    from tests.k8s_fake_cluster import gpu_pod

    return gpu_pod("ml", "late-train", 8, node=node)


def _cpu_pod(node: str) -> dict:
    from tests.k8s_fake_cluster import pod_asking

    return pod_asking("data", "etl", {"cpu": "32", "memory": "200Gi"}, node=node, kind="requests")


def _mig_pod(node: str) -> dict:
    from tests.k8s_fake_cluster import pod_asking

    return pod_asking("ml", "mig-infer", {"nvidia.com/mig-3g.40gb": "1"}, node=node)


@pytest.mark.parametrize("pod", [_late_gpu_pod, _cpu_pod, _mig_pod], ids=["gpu-pod", "cpu-pod", "mig-pod"])
def test_on_kubernetes_a_pod_that_landed_after_the_sweeps_pod_list_keeps_its_instance(aws, k8s_api, tmp_path, pod):
    """KubernetesScheduler.list_nodes takes the jobs from the sweep's pod list (up to 30 s old) and sees GPU pods
    only: a pod bound to the chosen node since then, or one asking for no nvidia.com/gpu (a CPU pod, a MIG slice),
    must keep its instance."""
    from tests.k8s_fake_cluster import gpu_node, gpu_pod, kubeconfig

    names, dns = _group(aws, "asg-a100", "a100-ondemand", 4)
    hosts = [n.split(".")[0] for n in names]
    for host in hosts:
        k8s_api.store.put("nodes", gpu_node(host, 8))
    k8s_api.store.put("pods", gpu_pod("ml", "train", 8, node=hosts[0]))
    deps = _wired(aws, tmp_path, "kubernetes", kubeconfig=kubeconfig(k8s_api, tmp_path))
    deps.scheduler.list_jobs()  # the sweep's pod list
    assert deps.pools.list_pools()[0].busy_nodes == 1
    chosen = max(i for i in dns if dns[i] != names[0])  # the shrink's choice: idle instances by id, highest first
    k8s_api.store.put("pods", pod(dns[chosen].split(".")[0]))
    result = deps.pools.resize_pool("a100-ondemand", 3, reason="empty overnight")
    assert result.status == "resized" and dns[chosen].split(".")[0] not in result.removed_nodes
    assert chosen in _live_ids(aws) and len(_live_ids(aws)) == 3


def _slurm_job(job_id: int, node: str, state: str) -> dict:
    t0 = 1_795_966_000
    return {"job_id": job_id, "name": f"train{job_id}", "partition": "gpu", "user_name": "alice", "account": "ml",
            "qos": "normal", "job_state": [state], "nodes": node, "node_count": {"set": True, "number": 1},
            "submit_time": {"set": True, "number": t0}, "start_time": {"set": True, "number": t0 + 60},
            "tres_alloc_str": "cpu=8,gres/gpu=8", "tres_per_node": "gres:gpu:8"}


def _on_slurm(aws, tmp_path, monkeypatch, squeue: dict):
    """An ASG whose instances are Slurm nodes; squeue and scontrol answer as Slurm does (tests/test_slurm_adapter.py)."""
    import json

    from tests.test_slurm_adapter import FakeCli
    from tools.slurm import SlurmScheduler

    names, dns = _group(aws, "asg-a100", "a100-ondemand", 4)
    hosts = {i: name.split(".")[0] for i, name in dns.items()}
    nodes_out = "".join(f"NodeName={h} Gres=gpu:a100:8 Partitions=gpu\n" for h in sorted(hosts.values()))
    answers = {("scontrol", "show", "nodes"): nodes_out, **squeue}
    answers.setdefault(("squeue", "--json"), lambda: json.dumps({"jobs": []}))
    slurm = SlurmScheduler(FakeCli(answers), stop_settle_s=0)
    monkeypatch.setattr("tools.slurm.slurm_scheduler_from_settings", lambda settings: slurm)
    deps = _wired(aws, tmp_path, "slurm")
    ids = sorted(dns)
    return deps, hosts, ids


def test_on_slurm_a_job_that_started_after_the_sweeps_squeue_keeps_its_instance(aws, tmp_path, monkeypatch):
    import json

    jobs: list[dict] = []
    deps, hosts, ids = _on_slurm(aws, tmp_path, monkeypatch, {("squeue", "--json"): lambda: json.dumps({"jobs": jobs})})
    jobs.append(_slurm_job(11, hosts[ids[0]], "RUNNING"))
    deps.scheduler.list_jobs()  # the sweep's squeue
    jobs.append(_slurm_job(12, hosts[ids[-1]], "RUNNING"))  # since then, on the instance the shrink would choose
    result = deps.pools.resize_pool("a100-ondemand", 3, reason="empty overnight")
    assert result.status == "resized" and hosts[ids[-1]] not in result.removed_nodes
    assert ids[-1] in _live_ids(aws) and ids[0] in _live_ids(aws)


def test_a_schedulers_list_nodes_given_directly_is_read_for_a_removal(aws):
    """`AwsAutoScalingPools(asg, ec2, scheduler.list_nodes)`, as docs/cloud-pools.md shows: a removal still reads
    list_nodes(for_removal=True), not the sweep's listing."""
    import json

    from tests.test_slurm_adapter import FakeCli
    from tools.slurm import SlurmScheduler

    names, dns = _group(aws, "asg-a100", "a100-ondemand", 4)
    ids = sorted(dns)
    jobs = [_slurm_job(11, dns[ids[0]].split(".")[0], "RUNNING")]
    cli = FakeCli({("squeue", "--json"): lambda: json.dumps({"jobs": jobs}),
                   ("scontrol", "show", "nodes"): "".join(f"NodeName={n.split('.')[0]} Gres=gpu:a100:8\n"
                                                          for n in names)})
    slurm = SlurmScheduler(cli, stop_settle_s=0)
    _, asg, ec2 = aws
    pools = AwsAutoScalingPools(asg, ec2, slurm.list_nodes, AwsPoolConfig(reserve_fraction=0.0), sleep=lambda s: None)
    slurm.list_jobs()
    jobs.append(_slurm_job(12, dns[ids[-1]].split(".")[0], "CONFIGURING"))
    result = pools.resize_pool("a100-ondemand", 3, reason="empty overnight")
    assert result.status == "resized" and ids[-1] in _live_ids(aws) and len(_live_ids(aws)) == 3


@pytest.mark.parametrize("state", ["CONFIGURING", "COMPLETING", "SUSPENDED"])
def test_on_slurm_a_job_holding_nodes_in_any_state_keeps_them(aws, tmp_path, monkeypatch, state):
    """CONFIGURING (nodes allocated, the prolog or the node boot running) reads as pending for the sweep; for a
    removal, every job Slurm has given nodes that has not finished counts, whatever its state."""
    import json

    jobs: list[dict] = []
    deps, hosts, ids = _on_slurm(aws, tmp_path, monkeypatch, {("squeue", "--json"): lambda: json.dumps({"jobs": jobs})})
    jobs.extend([_slurm_job(11, hosts[ids[0]], "RUNNING"), _slurm_job(12, hosts[ids[2]], "COMPLETED"),
                 _slurm_job(13, hosts[ids[-1]], state)])
    deps.scheduler.list_jobs()
    result = deps.pools.resize_pool("a100-ondemand", 3, reason="empty overnight")
    assert (result.status, result.removed_nodes) == ("resized", [hosts[ids[2]]])  # a finished job holds no node
    assert _live_ids(aws) == {ids[0], ids[1], ids[-1]}


def test_on_slurm_a_squeue_record_not_read_refuses_the_shrink(aws, tmp_path, monkeypatch):
    """An squeue record that could not be read (here: text output, a uid that is no number) may be a job on any
    node: the answer is not whole, and no instance is terminated on it."""
    from tests.test_slurm_adapter import Framed
    from tools.slurm_cli import SlurmError

    rows = []
    unsupported = SlurmError(["squeue", "--json"], "exited 1: unrecognized option", 1,
                             "squeue: unrecognized option '--json'")
    deps, hosts, ids = _on_slurm(aws, tmp_path, monkeypatch, {("squeue", "--json"): unsupported,
                                                             ("squeue", "-h"): Framed(rows)})
    row = ["11", "gpu", "alice", "1000", "ml", "normal", "RUNNING", "1", "gres:gpu:8", "2026-11-29T15:27:31",
           hosts[ids[0]], "train", "None", "2026-11-29T15:27:30", "11"]
    rows.extend([row, [*row[:1], "gpu", "bob", "x1001", *row[4:10], hosts[ids[-1]], "train2", *row[12:]]])
    rows[1][0] = rows[1][-1] = "12"
    deps.scheduler.list_jobs()
    result = deps.pools.resize_pool("a100-ondemand", 3, reason="empty overnight")
    assert result.status == "refused" and "squeue could not be read whole" in result.detail
    assert len(_live_ids(aws)) == 4


# -- a terminate whose answer was lost, and errors without an AWS answer --------------------------------------------
class _Asg:
    """The autoscaling client, with its terminate calls (and describes) answered as `terminate` / `describe` say."""

    def __init__(self, real, terminate=None, describe=None):
        self.real, self.terminate, self.describe = real, terminate, describe

    def __getattr__(self, name):
        return getattr(self.real, name)

    def terminate_instance_in_auto_scaling_group(self, **kw):
        return self.terminate(self.real, **kw)

    def describe_auto_scaling_groups(self, **kw):
        return (self.describe or self.real.describe_auto_scaling_groups)(**kw)


def _read_timeout():
    from botocore.exceptions import ReadTimeoutError

    return ReadTimeoutError(endpoint_url="https://autoscaling.us-east-1.amazonaws.com/")


def _answer_lost(real, **kw):  # it took effect; the answer never came
    real.terminate_instance_in_auto_scaling_group(**kw)
    raise _read_timeout()


def _refused(real, **kw):
    from botocore.exceptions import ClientError

    raise ClientError({"Error": {"Code": "ValidationError", "Message": "instance is not in InService"}},
                      "TerminateInstanceInAutoScalingGroup")


def _with(aws, asg, busy_first: bool = True) -> tuple[AwsAutoScalingPools, list[str]]:
    names, _ = _group(aws, "asg-a100", "a100-ondemand", 4)
    cluster = Cluster()
    cluster.set(names, busy={names[0]} if busy_first else set())
    _, _, ec2 = aws
    return AwsAutoScalingPools(asg, ec2, cluster, AwsPoolConfig(reserve_fraction=0.0), sleep=lambda s: None), names


def test_a_terminate_whose_answer_was_lost_is_reported_as_done(aws):
    """Else it raised, the resize was audited `failed` (a strike toward the circuit breaker) though its node went,
    and the forecast's planned scale-up back (carried by executed scale-downs only) was lost."""
    _, real, _ = aws
    pools, _ = _with(aws, _Asg(real, terminate=_answer_lost))
    result = pools.resize_pool("a100-ondemand", 2, reason="empty overnight")
    assert len(_live_ids(aws)) == 2
    assert (result.status, result.nodes_after, len(result.removed_nodes)) == ("resized", 2, 2)
    assert "ReadTimeoutError" in result.detail and "failed but took effect" in result.detail


def test_a_refused_terminate_is_an_error_that_says_nothing_went(aws):
    _, real, _ = aws
    pools, _ = _with(aws, _Asg(real, terminate=_refused))
    result = pools.resize_pool("a100-ondemand", 3, reason="empty overnight")
    assert (result.status, result.nodes_after, result.removed_nodes) == ("error", 4, [])
    assert "ValidationError" in result.detail and "nothing was terminated" in result.detail
    assert len(_live_ids(aws)) == 4


def test_a_terminate_that_fails_with_the_group_unreadable_says_its_fate_is_unknown(aws):
    _, real, _ = aws
    calls = []

    def describe(**kw):  # the shrink's own read answers; the one after the failed terminate does not
        calls.append(kw)
        if len(calls) > 1:
            raise _read_timeout()
        return real.describe_auto_scaling_groups(**kw)

    def timeout(real, **kw):
        raise _read_timeout()

    pools, _ = _with(aws, _Asg(real, terminate=timeout, describe=describe))
    result = pools.resize_pool("a100-ondemand", 3, reason="empty overnight")
    assert result.status == "error" and "whether it went is unknown" in result.detail


def test_an_error_without_an_aws_answer_is_raised_as_itself():
    """A read timeout or a dropped connection carries response=None: `_call` read its error code with
    getattr(exc, "response", {}).get(...), and raised AttributeError in its place."""
    from botocore.exceptions import ReadTimeoutError

    class Asg:
        def describe_auto_scaling_groups(self, **kw):
            raise _read_timeout()

    pools = AwsAutoScalingPools(Asg(), None, list, sleep=lambda s: None)
    with pytest.raises(ReadTimeoutError):
        pools.list_pools()


def test_growing_never_lowers_the_groups_desired_capacity():
    """DesiredCapacity 6 with 2 instances (GPU capacity short, a scale-up under way): a grow to 4 (a planned
    scale-up back) would cancel two instances the group asked for; it leaves the group as it is."""
    boto3 = require_module("boto3")
    from botocore.stub import Stubber

    asg = boto3.client("autoscaling", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    group = {"AutoScalingGroupName": "g", "MinSize": 1, "MaxSize": 8, "DesiredCapacity": 6, "DefaultCooldown": 0,
             "AvailabilityZones": ["a"], "HealthCheckType": "EC2", "CreatedTime": "2026-01-01T00:00:00Z",
             "Instances": [{"InstanceId": f"i-{k}", "InstanceType": "p4d.24xlarge", "AvailabilityZone": "a",
                            "LifecycleState": "InService", "HealthStatus": "Healthy",
                            "ProtectedFromScaleIn": False} for k in (1, 2)],
             "Tags": [{"Key": "steward.io/pool", "Value": "a100"}]}
    dns = {"Reservations": [{"Instances": [{"InstanceId": f"i-{k}", "PrivateDnsName": f"ip-10-0-0-{k}.ec2.internal"}
                                           for k in (1, 2)]}]}
    with Stubber(asg) as s_asg, Stubber(ec2) as s_ec2:
        for _ in range(2):
            s_asg.add_response("describe_auto_scaling_groups", {"AutoScalingGroups": [group]})
            s_ec2.add_response("describe_instances", dns)
        s_asg.add_response("set_desired_capacity", {}, {"AutoScalingGroupName": "g", "DesiredCapacity": 7,
                                                        "HonorCooldown": False})
        pools = AwsAutoScalingPools(asg, ec2, list, sleep=lambda s: None)
        kept = pools.resize_pool("a100", 4, reason="planned scale-up back")  # no SetDesiredCapacity call
        assert (kept.status, kept.nodes_after) == ("unchanged", 2) and "already 6" in kept.detail
        assert pools.resize_pool("a100", 7, reason="").status == "resized"  # above what it asks for: raised
        s_asg.assert_no_pending_responses()
