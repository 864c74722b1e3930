"""The simulated cluster's nodes: explicit ones, pool-generated ones, GPU UUIDs and hardware events."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from sim.scenario import Node, Pool, Scenario, ScenarioError

FB_TOTAL_MB = 81920.0  # framebuffer size when the model name gives none


@dataclass(eq=False, slots=True)
class SimNode:
    """A node as it exists now; `uid` keeps caches apart if a name is ever reused."""

    uid: int
    name: str
    pool: str | None
    gpus: int
    gpu_model: str
    created_at: float = 0.0
    profiling: bool = True  # its exporter reports the DCGM profiling fields
    # per GPU index: [(at, value)] sorted by time
    temp_events: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    xid_events: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)  # at the start
    label_events: list[tuple[float, dict[str, str]]] = field(default_factory=list)  # (at, labels set), by time

    def uuid(self, gpu: int) -> str:
        digest = hashlib.sha1(f"{self.name}/{gpu}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def fb_total_mb(self) -> float:
        for token in self.gpu_model.replace("_", "-").split("-"):
            if token.upper().endswith("GB") and token[:-2].isdigit():
                return float(token[:-2]) * 1024.0
        return FB_TOTAL_MB

    def temp_floor(self, gpu: int, t: float) -> float:
        """Highest temperature an event has forced on this GPU by time t (0 when none)."""
        events = self.temp_events.get(gpu)
        if not events:
            return 0.0
        return max((v for at, v in events if at <= t), default=0.0)

    def xid(self, gpu: int, t: float) -> tuple[int, float | None]:
        """The XID this GPU reports at time t, and when it happened."""
        events = self.xid_events.get(gpu)
        last: tuple[int, float | None] = (0, None)
        for at, value in events or ():
            if at <= t:
                last = (value, at)
        return last

    def labels_at(self, t: float) -> dict[str, str]:
        """The node's labels at time t: its own, with every label event up to t applied in order."""
        out = dict(self.labels)
        for at, labels in self.label_events:
            if at <= t:
                out.update(labels)
        return out


def _node(uid: int, name: str, pool: Pool | None, spec: Node | None) -> SimNode:
    gpus = (spec.gpus if spec and spec.gpus else None) or (pool.gpus_per_node if pool else 1)
    model = (spec.gpu_model if spec else None) or (pool.gpu_model if pool else "")
    profiling = spec.profiling if spec and spec.profiling is not None else (pool.profiling if pool else True)
    node = SimNode(uid=uid, name=name, pool=pool.name if pool else None, gpus=gpus, gpu_model=model,
                   profiling=profiling, labels=dict(spec.labels) if spec else {})
    for event in sorted(spec.events if spec else [], key=lambda e: e.at):
        gpu = event.gpu or 0
        if event.gpu_temp_c is not None:
            node.temp_events.setdefault(gpu, []).append((event.at, event.gpu_temp_c))
        if event.xid is not None:
            node.xid_events.setdefault(gpu, []).append((event.at, event.xid))
        if event.labels:
            node.label_events.append((event.at, dict(event.labels)))
    return node


def build_nodes(scenario: Scenario) -> tuple[list[SimNode], dict[str, int]]:
    """Nodes in a fixed order (explicit nodes of a pool first, then `<pool>-<i>` up to the pool's size),
    and per pool the next unused generated index."""
    taken = {n.name for n in scenario.nodes}
    nodes: list[SimNode] = []
    next_index: dict[str, int] = {}
    for pool in scenario.pools:
        explicit = [n for n in scenario.nodes if n.pool == pool.name]
        nodes.extend(_node(len(nodes), n.name, pool, n) for n in explicit)
        i = 0
        for _ in range(max(pool.nodes - len(explicit), 0)):
            while f"{pool.name}-{i}" in taken:
                i += 1
            nodes.append(_node(len(nodes), f"{pool.name}-{i}", pool, None))
            i += 1
        next_index[pool.name] = i
    nodes.extend(_node(len(nodes), n.name, None, n) for n in scenario.nodes if n.pool is None)
    names = {n.name for n in nodes}
    for i, job in enumerate(scenario.jobs):
        if job.node is not None and job.node not in names:
            raise ScenarioError(
                f"{scenario.name}: jobs[{i}].node: {job.node!r} is not a node here "
                f"(explicit nodes of a pool count toward its size)"
            )
    return nodes, next_index


def new_pool_node(uid: int, name: str, pool: Pool, at: float) -> SimNode:
    node = _node(uid, name, pool, None)
    node.created_at = at
    return node
