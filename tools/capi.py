"""ClusterApiPools: MachineDeployments as node pools; scale-downs remove exactly the Machines whose nodes run no job."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.cluster import PoolInfo, ResizeResult
from tools.kubernetes import KubernetesScheduler, api_message

GROUP, PLURAL = "cluster.x-k8s.io", "machinedeployments"
MIN_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
GPU_COUNT = "capacity.cluster-autoscaler.kubernetes.io/gpu-count"
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
# Set with each of the steward's delete-machine marks (what it was for, when): the steward only ever takes back
# marks that carry it, never a person's or another tool's.
STEWARD_MARK = "steward.io/delete-machine-for"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
PRICE = "steward.io/price-per-gpu-hour"
BILLING = "steward.io/billing"
_MERGE = "application/merge-patch+json"
log = logging.getLogger("steward.capi")


class CapiPoolConfig(BaseModel):
    """What the MachineDeployments' annotations do not say: prices, minimums, where to look."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = None  # None: MachineDeployments in every namespace
    version: str = "v1beta1"
    prices: dict[str, float] = {}  # pool -> price per GPU-hour, when not annotated
    min_nodes: dict[str, int] = {}  # pool -> floor; the stricter of this and the autoscaler annotation wins
    billing: Literal["on-demand", "reserved", "spot"] = "on-demand"
    currency: str = "USD"
    gpus_per_node: dict[str, int] = Field(default_factory=dict)


def _int(value: Any, default: int | None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class ClusterApiPools:
    """NodePools over Cluster API; the pods on each node come from the KubernetesScheduler's pod list."""

    def __init__(self, custom_api: Any, scheduler: KubernetesScheduler, config: CapiPoolConfig | None = None) -> None:
        self.custom = custom_api
        self.scheduler = scheduler
        self.config = config or CapiPoolConfig()
        self.api_calls = 0

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.api_calls += 1
        timeout = getattr(self.scheduler, "request_timeout_s", None)
        return json.loads(getattr(self.custom, method)(*args, _preload_content=False, _request_timeout=timeout,
                                                       **kwargs).data)

    def _list(self, plural: str, label_selector: str | None = None, namespace: str | None = None) -> list[dict]:
        ns = namespace or self.config.namespace
        if ns:
            got = self._call("list_namespaced_custom_object", GROUP, self.config.version, ns, plural,
                             label_selector=label_selector)
        else:
            got = self._call("list_cluster_custom_object", GROUP, self.config.version, plural,
                             label_selector=label_selector)
        return got.get("items") or []

    def _machine_nodes(self, machines: list[dict]) -> dict[str, list[dict]]:
        by_md: dict[str, list[dict]] = {}
        for m in machines:
            md = (m["metadata"].get("labels") or {}).get(DEPLOYMENT_LABEL)
            if md:
                by_md.setdefault(md, []).append(m)
        return by_md

    def _min(self, md: dict) -> int:
        annotated = _int((md["metadata"].get("annotations") or {}).get(MIN_SIZE), 0) or 0
        return max(annotated, self.config.min_nodes.get(md["metadata"]["name"], 0))

    def list_pools(self) -> list[PoolInfo]:
        mds = self._list(PLURAL)
        machines = self._machine_nodes(self._list("machines"))
        nodes = {n.name: n for n in self.scheduler.list_nodes()}
        pools = []
        for md in mds:
            name, notes = md["metadata"]["name"], md["metadata"].get("annotations") or {}
            md_nodes = [nodes[n] for n in (_node(m) for m in machines.get(name, [])) if n in nodes]
            gpus = _int(notes.get(GPU_COUNT), None) or self.config.gpus_per_node.get(name) or max(
                (n.gpus for n in md_nodes), default=0)
            if not gpus:
                continue  # a CPU pool is not the steward's business
            billing = notes.get(BILLING, self.config.billing)
            pools.append(PoolInfo(
                name=name, provider="capi", gpu_model=next((n.gpu_model for n in md_nodes if n.gpu_model), ""),
                gpus_per_node=gpus, nodes=_int(md["spec"].get("replicas"), 1) or 0, min_nodes=self._min(md),
                max_nodes=_int(notes.get(MAX_SIZE), None),
                price_per_gpu_hour=float(notes.get(PRICE) or self.config.prices.get(name, 0.0)),
                billing=billing if billing in ("on-demand", "reserved", "spot") else self.config.billing,
                busy_nodes=sum(1 for n in md_nodes if n.jobs), currency=self.config.currency))
        return pools

    def resize_pool(self, pool: str, target_nodes: int, *, reason: str = "") -> ResizeResult:
        """Grow by scaling up; shrink only by Machines whose nodes run no job, marked so CAPI removes those."""
        md = next((m for m in self._list(PLURAL) if m["metadata"]["name"] == pool), None)
        if md is None:
            return ResizeResult(pool=pool, status="error", nodes_before=0, nodes_after=0,
                                detail=f"no MachineDeployment named {pool!r}")
        ns, before = md["metadata"]["namespace"], _int(md["spec"].get("replicas"), 1) or 0
        notes = md["metadata"].get("annotations") or {}
        floor, ceiling = self._min(md), _int(notes.get(MAX_SIZE), None)

        def result(status: Any, after: int = before, removed: list[str] | None = None, detail: str = "") -> ResizeResult:
            return ResizeResult(pool=pool, status=status, nodes_before=before, nodes_after=after,
                                removed_nodes=removed or [], detail=detail)

        if target_nodes == before:
            return result("unchanged")
        if target_nodes < floor:
            return result("refused", detail=f"{target_nodes} nodes is below the pool's minimum of {floor}")
        if ceiling is not None and target_nodes > ceiling:
            return result("refused", detail=f"{target_nodes} nodes is above the pool's maximum of {ceiling}")
        try:
            if target_nodes > before:
                self._scale(ns, pool, target_nodes)
                return result("resized", target_nodes)
            return self._shrink(ns, pool, before, target_nodes, result)
        except Exception as exc:
            if getattr(exc, "status", None) is None:
                raise
            return result("error", detail=f"HTTP {exc.status}: {api_message(exc)}")  # type: ignore[attr-defined]

    def _shrink(self, ns: str, pool: str, before: int, target: int, result: Any) -> ResizeResult:
        machines = [m for m in self._list("machines", f"{DEPLOYMENT_LABEL}={pool}", namespace=ns)
                    if not m["metadata"].get("deletionTimestamp")]
        if len(machines) != before:
            # A Machine being deleted (remediated) or one not created yet: the scale to `target` would remove other
            # than `before - target` Machines, and a mark would stay on a live one.
            return result("refused", detail=f"the MachineDeployment is mid-change: {len(machines)} live machines "
                                            f"for spec.replicas {before}; not resized")
        busy = self.scheduler.workloads_by_node()  # every pod bound to each node, right now
        empty = [m for m in machines if not busy.get(_node(m) or "")]
        # CAPI removes marked Machines first, whoever marked them: a mark on a busy one (a shrink that stopped
        # halfway, a person's) would make this scale-down remove that node, not the empty ones chosen.
        doomed = [_node(m) or m["metadata"]["name"] for m in machines if busy.get(_node(m) or "")
                  and DELETE_MACHINE in (m["metadata"].get("annotations") or {})]
        if doomed:
            return result("refused", detail=f"{', '.join(doomed)} run jobs and carry {DELETE_MACHINE}: a scale-down "
                                            "would remove them first; not resized")
        # Newest first: the nodes least likely to hold warm caches or someone's next job.
        empty.sort(key=lambda m: m["metadata"].get("creationTimestamp", ""), reverse=True)
        need = before - target
        if len(empty) < need:
            return result("refused", detail=f"only {len(empty)} of {len(machines)} machines run no job; "
                                            f"{need} would have to go")
        chosen = empty[:need]
        mark = f"resize {pool} {before}->{target} at {datetime.now(UTC).isoformat(timespec='seconds')}"
        marked: list[dict] = []
        try:
            for m in chosen:
                marked.append(m)  # before the call: a mark whose answer is lost may have been set
                self._mark(ns, m, mark)
        except Exception as exc:  # a mark refused, throttled or unanswered: take back every mark set so far
            kept = self._take_back(ns, marked)
            if getattr(exc, "status", None) is None:
                raise
            why = f"HTTP {exc.status}: {api_message(exc)}"  # type: ignore[attr-defined]
            return result("error", detail=f"marking machines of {pool} failed ({why}); not resized; "
                                          f"{_marks_said(kept)}")
        # A pod may have landed between the check and the marks: look again before scaling.
        try:
            busy = self.scheduler.workloads_by_node()
        except Exception:
            self._take_back(ns, chosen)
            raise
        landed = [_node(m) for m in chosen if busy.get(_node(m) or "")]
        if landed:
            kept = self._take_back(ns, chosen)
            return result("refused", detail=f"a job started on {', '.join(map(str, landed))} meanwhile; not resized"
                                            + (f"; {_marks_said(kept)}" if kept else ""))
        try:
            self._scale(ns, pool, target)
        except Exception as exc:  # throttled, refused or no answer: did it happen?
            return self._scale_failed(ns, pool, target, machines, chosen, exc, result)
        return self._scaled(ns, pool, target, machines, chosen, result)

    def _scaled(self, ns: str, pool: str, target: int, machines: list[dict], chosen: list[dict],
                result: Any) -> ResizeResult:
        """After the scale call, the Machines read again: the nodes reported are those that went (the Machine gone
        or being deleted), and those chosen that stay marked while the controller still has Machines to remove
        (marked ones first). A chosen Machine still there once nothing more is to be removed (another Machine went
        in its place) keeps no mark; while removals are under way every mark stays (taking one off could let the
        controller remove another Machine, perhaps a busy one)."""
        def name(m: dict) -> str:
            return str(m["metadata"]["name"])

        try:
            now = self._list("machines", f"{DEPLOYMENT_LABEL}={pool}", namespace=ns)
        except Exception as exc:
            log.warning("machines of %s not read again after its scale to %d: %s", pool, target, exc)
            return result("resized", target, [_node(m) or name(m) for m in chosen],
                          detail="the machines could not be read again: the marked ones are reported")
        live = {name(m) for m in now if not m["metadata"].get("deletionTimestamp")}
        went = [_node(m) or name(m) for m in machines if name(m) not in live]
        pending = len(live) - target  # Machines the controller has still to remove
        staying = [m for m in chosen if name(m) in live]
        if not staying:
            return result("resized", target, went)
        if pending <= 0:
            kept = self._take_back(ns, staying)
            return result("resized", target, went, detail=(
                f"{', '.join(_node(m) or name(m) for m in staying)} stayed (another machine went in its place); "
                + _marks_said(kept)))
        if len(staying) <= pending:
            return result("resized", target, went + [_node(m) or name(m) for m in staying],
                          detail=f"{', '.join(_node(m) or name(m) for m in staying)} marked, being removed")
        return result("resized", target, went, detail=(
            f"{len(staying)} chosen machines still marked, {pending} still to be removed: "
            f"{', '.join(name(m) for m in staying)} may keep {DELETE_MACHINE}"))

    def _mark(self, ns: str, machine: dict, mark: str | None) -> None:
        """Set (mark: what it is for) or take back (None) the steward's delete-machine mark on one Machine."""
        self._call("patch_namespaced_custom_object", GROUP, self.config.version, ns, "machines",
                   machine["metadata"]["name"],
                   {"metadata": {"annotations": {DELETE_MACHINE: "yes" if mark else None, STEWARD_MARK: mark}}},
                   _content_type=_MERGE)

    def _take_back(self, ns: str, machines: list[dict]) -> list[str]:
        """Take the steward's marks off these Machines, each tried; the names whose mark may still be there."""
        kept = []
        for m in machines:
            try:
                self._mark(ns, m, None)
            except Exception:
                log.warning("could not take the %s mark off machine %s", DELETE_MACHINE, m["metadata"]["name"])
                kept.append(m["metadata"]["name"])
        return kept

    def release_marks(self, pool: str) -> list[str]:
        """Take back the delete-machine marks the steward left on this pool's Machines (a shrink that stopped
        between its marks and its scale call: the process killed, a call that failed): the Machines whose mark
        was taken off. Marks without STEWARD_MARK (a person's, another tool's) are left alone, and so is every
        mark while the MachineDeployment has fewer replicas than Machines (a scale-down under way removes the
        marked Machines; taking a mark off then would let it remove another one, perhaps a busy one)."""
        md = next((m for m in self._list(PLURAL) if m["metadata"]["name"] == pool), None)
        if md is None:
            return []
        ns = md["metadata"]["namespace"]
        machines = self._list("machines", f"{DEPLOYMENT_LABEL}={pool}", namespace=ns)
        live = [m for m in machines if not m["metadata"].get("deletionTimestamp")]
        replicas = _int(md["spec"].get("replicas"), None)
        if replicas is None or len(live) > replicas:
            return []
        ours = [m for m in live if STEWARD_MARK in (m["metadata"].get("annotations") or {})]
        kept = self._take_back(ns, ours)
        return [m["metadata"]["name"] for m in ours if m["metadata"]["name"] not in kept]

    def _scale_failed(self, ns: str, pool: str, target: int, machines: list[dict], chosen: list[dict],
                      exc: Exception, result: Any) -> ResizeResult:
        """A failed scale call: if it took effect after all, say so; if not, take the delete-machine marks back,
        so that no later scale-down (the autoscaler's, a person's) removes a node on this stale choice."""
        code = getattr(exc, "status", None)
        why = f"HTTP {code}: {api_message(exc)}" if code is not None else f"{type(exc).__name__}: {exc}"
        try:
            md = self._call("get_namespaced_custom_object", GROUP, self.config.version, ns, PLURAL, pool)
            replicas = _int(md["spec"].get("replicas"), None)
        except Exception:
            replicas = None
        if replicas == target:
            done = self._scaled(ns, pool, target, machines, chosen, result)
            return done.model_copy(update={"detail": f"the scale call failed ({why}) but took effect"
                                                     + (f"; {done.detail}" if done.detail else "")})
        # The MachineDeployment unread: the scale may have happened, and a mark taken off now could let CAPI
        # remove another machine; the marks stay, for release_marks once the pool can be read.
        kept = self._take_back(ns, chosen) if replicas is not None else [m["metadata"]["name"] for m in chosen]
        return result("error", detail=f"scaling {pool} to {target} failed ({why}); not resized; {_marks_said(kept)}")

    def _scale(self, ns: str, pool: str, replicas: int) -> None:
        self._call("patch_namespaced_custom_object_scale", GROUP, self.config.version, ns, PLURAL, pool,
                   {"spec": {"replicas": replicas}}, _content_type=_MERGE)


def _marks_said(kept: list[str]) -> str:
    return (f"machines {', '.join(kept)} may still carry {DELETE_MACHINE}" if kept
            else f"{DELETE_MACHINE} marks taken back")


def _node(machine: dict) -> str | None:
    return ((machine.get("status") or {}).get("nodeRef") or {}).get("name")


def capi_pools_from_settings(settings: Any, scheduler: KubernetesScheduler, config: CapiPoolConfig | None = None,
                             *, api_client: Any = None) -> ClusterApiPools:
    from kubernetes import client

    from tools.kubernetes import kubernetes_api_client

    return ClusterApiPools(client.CustomObjectsApi(api_client or kubernetes_api_client(settings)), scheduler, config)
