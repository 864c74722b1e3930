"""AwsAutoScalingPools: tagged EC2 Auto Scaling groups as node pools; scale-downs terminate only idle instances."""

from __future__ import annotations

import inspect
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from core.cluster import NodeInfo, NodesUnknown, PoolInfo, ResizeResult
from tools.aws_instance_types import gpus_of

log = logging.getLogger(__name__)

POOL_TAG = "steward.io/pool"
PRICE_TAG = "steward.io/price-per-gpu-hour"
GPUS_TAG = "steward.io/gpus-per-node"
MODEL_TAG = "steward.io/gpu-model"
BILLING_TAG = "steward.io/billing"
NODE_NAME_TAG = "steward.io/node-name"
THROTTLED = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
                       "RequestThrottled", "SlowDown"})
Billing = Literal["on-demand", "reserved", "spot"]
_LIVE = frozenset({"Pending", "Pending:Wait", "Pending:Proceed", "InService"})


class AwsPoolConfig(BaseModel):
    """What the groups' tags do not say, and how hard to lean on the AWS API."""

    model_config = ConfigDict(extra="forbid")

    region: str | None = None
    endpoint_url: str | None = None  # a VPC endpoint, or a local test server
    pool_tag: str = POOL_TAG
    cache_s: float = Field(default=30.0, ge=0)  # one describe per sweep; resizes always read fresh
    prices: dict[str, float] = {}  # pool -> price per GPU-hour, when not tagged
    reserve_fraction: float = Field(default=0.10, ge=0, le=1)  # the policy's reserve: GPUs kept free, never released
    protect_busy: bool = False  # also set scale-in protection on instances that run jobs
    currency: str = "USD"
    max_attempts: int = Field(default=6, ge=1)  # per call, throttling included


@dataclass
class _Group:
    name: str  # the ASG name
    pool: str
    tags: dict[str, str]
    min_size: int
    max_size: int
    desired: int
    instances: list[dict[str, Any]]  # ASG instance records that are pending or in service


def _tag_number(group: _Group, tag: str, default: float) -> float:
    raw = group.tags.get(tag)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"Auto Scaling group {group.name}: tag {tag}={raw!r} is not a number") from None
    if value < 0:
        raise ValueError(f"Auto Scaling group {group.name}: tag {tag}={raw!r} is negative")
    return value


class AwsAutoScalingPools:
    """NodePools over EC2 Auto Scaling; `nodes()` (e.g. a scheduler's list_nodes) says which instance runs jobs.
    A removal is decided on `nodes(for_removal=True)` where `nodes` takes it (the schedulers' list_nodes: every
    workload on each node, read right then; NodesUnknown when that cannot be read whole), else on `nodes()`."""

    def __init__(self, autoscaling: Any, ec2: Any, nodes: Callable[[], list[NodeInfo]],
                 config: AwsPoolConfig | None = None, *, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.asg, self.ec2, self.nodes = autoscaling, ec2, nodes
        takes = _takes(nodes, "for_removal")
        self.nodes_now = partial(cast(Callable[..., list[NodeInfo]], nodes), for_removal=True) if takes else nodes
        self.config = config or AwsPoolConfig()
        self._sleep, self._monotonic = sleep, monotonic
        self.api_calls = 0
        self._cache: tuple[float, dict[str, _Group], dict[str, set[str]]] | None = None

    # -- AWS calls ---------------------------------------------------------------------------------
    def _call(self, client: Any, method: str, **kwargs: Any) -> dict[str, Any]:
        """One API call; throttling that botocore's own retries did not absorb is retried with jittered backoff."""
        for attempt in range(1, self.config.max_attempts + 1):
            self.api_calls += 1
            try:
                return getattr(client, method)(**kwargs)
            except Exception as exc:
                # ClientError carries AWS's answer; a read timeout or a dropped connection has response None.
                code = ((getattr(exc, "response", None) or {}).get("Error") or {}).get("Code", "")
                if code not in THROTTLED or attempt == self.config.max_attempts:
                    raise
                self._sleep(min(20.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))
        raise AssertionError("unreachable")

    def _pages(self, client: Any, method: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self._call(client, method, **kwargs, **({"NextToken": token} if token else {}))
            items.extend(page.get(key) or [])
            token = page.get("NextToken")
            if not token:
                return items

    def _read(self, fresh: bool) -> tuple[dict[str, _Group], dict[str, set[str]]]:
        """Tagged groups by pool, and each instance's possible node names; cached for cache_s seconds."""
        now = self._monotonic()
        if not fresh and self._cache is not None and now - self._cache[0] < self.config.cache_s:
            return self._cache[1], self._cache[2]
        tag = self.config.pool_tag
        raw = self._pages(self.asg, "describe_auto_scaling_groups", "AutoScalingGroups",
                          Filters=[{"Name": "tag-key", "Values": [tag]}], MaxRecords=100)
        groups: dict[str, _Group] = {}
        for g in raw:
            tags = {t["Key"]: t.get("Value", "") for t in g.get("Tags") or []}
            pool = tags.get(tag)
            if not pool:
                continue
            if pool in groups:
                raise ValueError(f"two Auto Scaling groups carry {tag}={pool}: {groups[pool].name}, "
                                 f"{g['AutoScalingGroupName']}; a pool is one group")
            live = [i for i in g.get("Instances") or [] if i.get("LifecycleState") in _LIVE]
            groups[pool] = _Group(g["AutoScalingGroupName"], pool, tags, int(g["MinSize"]), int(g["MaxSize"]),
                                  int(g["DesiredCapacity"]), live)
        names = self._instance_names([i["InstanceId"] for gr in groups.values() for i in gr.instances])
        self._cache = (now, groups, names)
        return groups, names

    def _instance_names(self, ids: list[str]) -> dict[str, set[str]]:
        """Names a node of each instance may have: the id, the private DNS name and its host part, a tag."""
        names: dict[str, set[str]] = {i: {i} for i in ids}
        for start in range(0, len(ids), 200):
            for res in self._pages(self.ec2, "describe_instances", "Reservations", InstanceIds=ids[start:start + 200]):
                for inst in res.get("Instances") or []:
                    found = names.setdefault(inst["InstanceId"], {inst["InstanceId"]})
                    dns = inst.get("PrivateDnsName") or ""
                    found.update(n for n in (dns, dns.split(".")[0]) if n)
                    found.update(t["Value"] for t in inst.get("Tags") or [] if t["Key"] == NODE_NAME_TAG)
        return names

    # -- pools -------------------------------------------------------------------------------------
    def _busy(self, group: _Group, names: dict[str, set[str]], nodes: list[NodeInfo]) -> set[str]:
        """Instance ids that run a job; an instance no node maps to counts as busy (it might)."""
        by_name = {n.name: n for n in nodes}
        busy = set()
        for inst in group.instances:
            matched = [by_name[n] for n in names.get(inst["InstanceId"], ()) if n in by_name]
            if not matched or any(n.jobs for n in matched):
                busy.add(inst["InstanceId"])
        return busy

    def _shape(self, group: _Group) -> tuple[int, str]:
        known = gpus_of(next((i.get("InstanceType") for i in group.instances if i.get("InstanceType")), None))
        gpus = int(_tag_number(group, GPUS_TAG, known[0] if known else 0))
        return gpus, group.tags.get(MODEL_TAG) or (known[1] if known else "")

    def list_pools(self) -> list[PoolInfo]:
        groups, names = self._read(fresh=False)
        nodes = self.nodes()
        pools = []
        for pool, g in sorted(groups.items()):
            gpus, model = self._shape(g)
            if gpus <= 0:
                log.warning("pool %s (ASG %s): unknown GPUs per node; tag it %s", pool, g.name, GPUS_TAG)
                continue
            billing = cast(Billing, g.tags.get(BILLING_TAG, "on-demand"))
            pools.append(PoolInfo(
                name=pool, provider="aws", gpu_model=model, gpus_per_node=gpus, nodes=len(g.instances),
                min_nodes=g.min_size, max_nodes=g.max_size,
                price_per_gpu_hour=_tag_number(g, PRICE_TAG, self.config.prices.get(pool, 0.0)),
                billing=billing if billing in ("on-demand", "reserved", "spot") else "on-demand",
                busy_nodes=len(self._busy(g, names, nodes)), currency=self.config.currency))
        return pools

    def resize_pool(self, pool: str, target_nodes: int, *, reason: str = "") -> ResizeResult:
        """Shrink by terminating instances whose nodes run no job (decrementing the desired capacity with
        each), never below MinSize or the reserve; grow by raising the desired capacity. Idempotent."""
        groups, names = self._read(fresh=True)
        g = groups.get(pool)
        before = len(g.instances) if g else 0

        def result(status: Literal["resized", "unchanged", "refused", "error"], after: int = before,
                   removed: list[str] | None = None, detail: str = "") -> ResizeResult:
            return ResizeResult(pool=pool, status=status, nodes_before=before, nodes_after=after,
                                removed_nodes=removed or [], detail=detail)

        if g is None:
            return result("error", detail=f"no Auto Scaling group tagged {self.config.pool_tag}={pool}")
        if target_nodes == before:
            return result("unchanged")
        if target_nodes < g.min_size:
            return result("refused", detail=f"{target_nodes} nodes is below the group's MinSize of {g.min_size}")
        if target_nodes > g.max_size:
            return result("refused", detail=f"{target_nodes} nodes is above the group's MaxSize of {g.max_size}")
        if target_nodes > before:
            if g.desired >= target_nodes:  # it asks for more than runs (capacity short, a scale-up under way)
                return result("unchanged", detail=f"the group's DesiredCapacity is already {g.desired} ({before} "
                                                  "instances run); a grow never lowers it")
            self._call(self.asg, "set_desired_capacity", AutoScalingGroupName=g.name, DesiredCapacity=target_nodes,
                       HonorCooldown=False)
            self._cache = None
            return result("resized", target_nodes)
        return self._shrink(g, names, before, target_nodes, result)

    def _shrink(self, g: _Group, names: dict[str, set[str]], before: int, target: int, result: Any) -> ResizeResult:
        try:
            busy = self._busy(g, names, self.nodes_now())
        except NodesUnknown as exc:
            return result("refused", detail=f"{exc}; not resized")
        if target < len(busy):
            return result("refused", detail=f"{len(busy)} instances run jobs (or map to no node); "
                                            f"{target} nodes would remove a busy one")
        gpus, _ = self._shape(g)
        need_free = math.ceil(round(self.config.reserve_fraction * before * gpus, 9))
        if (target - len(busy)) * gpus < need_free:
            return result("refused", detail=f"{target} nodes leave {(target - len(busy)) * gpus} free GPUs; "
                                            f"the reserve is {need_free}")
        idle = [i for i in g.instances if i["InstanceId"] not in busy and not i.get("ProtectedFromScaleIn")]
        idle.sort(key=lambda i: i["InstanceId"], reverse=True)  # deterministic choice
        need = before - target
        if len(idle) < need:
            return result("refused", detail=f"only {len(idle)} of {before} instances run no job and are not "
                                            f"protected; {need} would have to go")
        if self.config.protect_busy and busy:
            self._call(self.asg, "set_instance_protection", AutoScalingGroupName=g.name,
                       InstanceIds=sorted(busy), ProtectedFromScaleIn=True)
        # A job may have started since: read again (fresh), right before terminating anything.
        try:
            still_busy = self._busy(g, names, self.nodes_now())
        except NodesUnknown as exc:
            return result("refused", detail=f"{exc}; not resized")
        chosen = [i["InstanceId"] for i in idle if i["InstanceId"] not in still_busy][:need]
        if len(chosen) < need:
            return result("refused", detail="a job started on a chosen instance meanwhile; not resized")
        lost: list[str] = []  # calls that failed and took effect all the same
        for k, iid in enumerate(chosen):
            try:
                self._call(self.asg, "terminate_instance_in_auto_scaling_group", InstanceId=iid,
                           ShouldDecrementDesiredCapacity=True)
            except Exception as exc:  # refused, throttled past the retries, or its answer lost: what went?
                failed = self._terminate_failed(g, names, before, target, chosen[:k + 1], exc, result)
                if failed is not None:
                    return failed
                lost.append(f"{iid} ({type(exc).__name__}: {exc})")
        self._cache = None
        return result("resized", target, [_node_name(i, names) for i in chosen],
                      detail=f"terminated {', '.join(chosen)}"
                             + (f"; the calls for {'; '.join(lost)} failed but took effect" if lost else ""))

    def _terminate_failed(self, g: _Group, names: dict[str, set[str]], before: int, target: int, tried: list[str],
                          exc: Exception, result: Any) -> ResizeResult | None:
        """A terminate call failed (the last of `tried`): it may have taken effect all the same, its answer lost.
        None when the group read again shows that instance gone (the shrink goes on); else the result, saying
        which instances went, whatever the calls answered."""
        why = f"{type(exc).__name__}: {exc}"
        self._cache = None
        try:
            now = self._read(fresh=True)[0].get(g.pool)
            if now is None:
                raise LookupError(f"no group is tagged {self.config.pool_tag}={g.pool} any more")
        except Exception as read_exc:  # the failed call's fate unknown: only what was answered is said
            done = tried[:-1]
            return result("error", before - len(done), [_node_name(i, names) for i in done],
                          detail=f"terminating {tried[-1]} failed ({why}) and the group could not be read "
                                 f"({type(read_exc).__name__}: {read_exc}): whether it went is unknown"
                                 + (f"; terminated {', '.join(done)}" if done else ""))
        live = {i["InstanceId"] for i in now.instances}
        if tried[-1] not in live:
            return None
        went = [i for i in tried if i not in live]
        removed = [_node_name(i, names) for i in went]
        return result("error", before - len(went), removed,
                      detail=f"terminating {tried[-1]} failed ({why}); "
                             + (f"terminated {', '.join(went)}; " if went else "nothing was terminated; ")
                             + f"{before - len(went)} nodes, not {target}")


def _takes(function: Callable[..., Any], keyword: str) -> bool:
    try:
        return keyword in inspect.signature(function).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return False


def _node_name(instance_id: str, names: dict[str, set[str]]) -> str:
    """The node name an instance is reported by: the first of its names other than its id (the host part of its
    private DNS name), else its id."""
    node = sorted(n for n in names.get(instance_id, ()) if n != instance_id)
    return node[0] if node else instance_id


def aws_pools_from_settings(settings: Any, nodes: Callable[[], list[NodeInfo]], config: AwsPoolConfig | None = None,
                            *, session: Any = None) -> AwsAutoScalingPools:
    """Clients with adaptive retries; region and endpoint from config, else STEWARD_AWS_REGION / _ENDPOINT_URL."""
    import boto3
    from botocore.config import Config

    config = config or AwsPoolConfig(region=getattr(settings, "aws_region", None),
                                     endpoint_url=getattr(settings, "aws_endpoint_url", None))
    retry = Config(retries={"mode": "adaptive", "max_attempts": 10}, connect_timeout=5, read_timeout=30)
    session = session or boto3.session.Session(region_name=config.region)
    kwargs = {"config": retry, "endpoint_url": config.endpoint_url}
    return AwsAutoScalingPools(session.client("autoscaling", **kwargs), session.client("ec2", **kwargs), nodes,
                               config)
