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
