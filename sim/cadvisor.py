"""cAdvisor-style process counters (CPU seconds, network and disk bytes) for the simulated jobs, so rate() works."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sim.lifecycle import Lifecycle, Run
from sim.metrics import io_sample

_S = TypeVar("_S")

MB = 1e6  # the simulator's MB/s are decimal megabytes, as PrometheusMetrics divides by 1e6
METRICS = [
    ("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds."),
    ("container_network_receive_bytes_total", "Cumulative count of bytes received."),
    ("container_fs_reads_bytes_total", "Cumulative count of bytes read."),
    ("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted."),
    ("container_fs_writes_bytes_total", "Cumulative count of bytes written."),
]


@dataclass(slots=True)
class _Totals:
    next_k: int  # first sample index not yet added
    cpu_s: float = 0.0
    rx_bytes: float = 0.0
    read_bytes: float = 0.0
    tx_bytes: float = 0.0
    write_bytes: float = 0.0


def first_sample(run: Run, step: float) -> int:
    """The index of a run's first sample (the first step at or after it started)."""
    return math.ceil(run.started / step - 1e-6)


def new_samples(totals: Any, run: Run, now: float, step: float,
                sample: Callable[[Run, float, int], _S | None]) -> Iterator[_S]:
    """The run's samples up to `now` not yet added to `totals` (from its `next_k`), oldest first; once they are all
    taken, `totals.next_k` moves past them, so a counter adds each sample once."""
    k_now = math.floor(now / step + 1e-6)
    for k in range(totals.next_k, k_now + 1):
        value = sample(run, k * step, k)
        if value is not None:
            yield value
    totals.next_k = max(totals.next_k, k_now + 1)


@dataclass
class ProcessCounters:
    """Integrates each running job's per-sample CPU / network / disk rates into monotonic counters.

    Scrapes must come in time order (the simulated clock only moves forward); each sample is added once.
    """

    lifecycle: Lifecycle
    step: float
    _totals: dict[int, _Totals] = field(default_factory=dict)

    def _advance(self, run: Run, now: float) -> _Totals:
        totals = self._totals.get(run.index) or self._totals.setdefault(run.index, _Totals(first_sample(run, self.step)))
        for cpu_pct, rx_mbps, read_mbps, tx_mbps, write_mbps in new_samples(totals, run, now, self.step, io_sample):
            totals.cpu_s += cpu_pct / 100.0 * self.step
            totals.rx_bytes += rx_mbps * MB * self.step
            totals.read_bytes += read_mbps * MB * self.step
            totals.tx_bytes += tx_mbps * MB * self.step
            totals.write_bytes += write_mbps * MB * self.step
        return totals

    def render(self, now: float) -> str:
        """One scrape at `now`: jobs that run and report now; a job in a `metrics: missing` phase is left out."""
        rows: list[tuple[str, str, _Totals]] = []
        for run in self.lifecycle.runs:
            if not run.running_at(now):
                continue
            totals = self._advance(run, now)
            if io_sample(run, now, math.floor(now / self.step + 1e-6)) is None:
                continue
            job = run.job
            if job.scheduler == "kubernetes":
                owner = f'namespace="{job.namespace}",pod="{job.name}"'
                container = "main"
            else:  # Slurm: a job-level cgroup exporter relabelled to cAdvisor's names (see docs)
                owner = f'hpc_job="{job.name}"'
                container = "batch"
            rows.append((f'container="{container}",{owner}', f'interface="eth0",{owner}', totals))
        out: list[str] = []
        for (name, help_text), pick in zip(METRICS, ("cpu_s", "rx_bytes", "read_bytes", "tx_bytes", "write_bytes"),
                                   strict=True):
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} counter")
            for container_labels, net_labels, totals in rows:
                labels = net_labels if pick in ("rx_bytes", "tx_bytes") else container_labels
                out.append(f"{name}{{{labels}}} {getattr(totals, pick):.6f}")
        return "\n".join(out) + "\n"
