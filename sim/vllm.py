"""vLLM's serving metrics for simulated inference jobs (phase keys `requests_per_s`, `latency_s`), so rate() works.

Names, types and buckets are vLLM's (v1 engine, vllm/v1/metrics/loggers.py): the histogram
`vllm:e2e_request_latency_seconds` (`_bucket{le}`, `_sum`, `_count`), the counter
`vllm:request_success_total{finished_reason}` and the gauge `vllm:num_requests_running`, each labelled
`model_name` (the job's `model_name`, default its name) and `engine="0"`. The series also carry the job's
`namespace` and `pod` (Slurm: `hpc_job`), as a Kubernetes service-discovery relabelling would attach them.

Each sample (one scenario `step`) adds `requests_per_s * step` requests. Their latencies are taken to be
lognormal with the sample's `latency_s` as the mean and a shape sigma of 0.5 (p50 ~ 0.88x the mean, p99 ~ 2.8x:
the right-skewed tail LLM serving has, from output lengths that vary), so each bucket `le` gains that many
requests times the lognormal CDF at `le`, and `_sum` gains requests x mean. Finished requests are split 90 %
`stop`, 10 % `length`, none `abort`. Counts are served rounded down (whole requests, monotone in time and in
`le`); `_count` equals the `+Inf` bucket. `vllm:num_requests_running` is requests/s x latency (Little's law).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sim.cadvisor import first_sample, new_samples
from sim.lifecycle import Lifecycle, Run
from sim.metrics import serving_sample

# vLLM's request_latency_buckets for vllm:e2e_request_latency_seconds
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)
SIGMA = 0.5  # lognormal shape of the per-request latency around the phase's mean
FINISHED = (("stop", 0.9), ("length", 0.1), ("abort", 0.0))
LATENCY = "vllm:e2e_request_latency_seconds"
SUCCESS = "vllm:request_success_total"
RUNNING = "vllm:num_requests_running"


def latency_cdf(le: float, mean: float) -> float:
    """Share of requests finished within `le` seconds when latency is lognormal with mean `mean` (sigma SIGMA)."""
    if mean <= 0:
        return 1.0
    mu = math.log(mean) - SIGMA * SIGMA / 2
    return 0.5 * (1.0 + math.erf((math.log(le) - mu) / (SIGMA * math.sqrt(2.0))))


@dataclass(slots=True)
class _Totals:
    next_k: int
    requests: float = 0.0
    latency_sum: float = 0.0
    buckets: list[float] = field(default_factory=lambda: [0.0] * len(LATENCY_BUCKETS))
    running: float = 0.0


@dataclass
class ServingCounters:
    """Integrates each serving job's per-sample request rate and latency into vLLM's counters and histogram.

    Scrapes come in time order (the simulated clock only moves forward); each sample is added once.
    """

    lifecycle: Lifecycle
    step: float
    _totals: dict[int, _Totals] = field(default_factory=dict)

    def _advance(self, run: Run, now: float) -> _Totals:
        totals = self._totals.get(run.index) or self._totals.setdefault(run.index, _Totals(first_sample(run, self.step)))
        for rps, latency in new_samples(totals, run, now, self.step, serving_sample):
            n = rps * self.step
            totals.requests += n
            totals.latency_sum += n * latency
            for i, le in enumerate(LATENCY_BUCKETS):
                totals.buckets[i] += n * latency_cdf(le, latency)
            totals.running = rps * latency
        return totals

    def render(self, now: float) -> str:
        """One scrape at `now`: serving jobs that run and report now (nothing at all when none does)."""
        rows: list[tuple[str, _Totals]] = []
        k_now = math.floor(now / self.step + 1e-6)
        for run in self.lifecycle.runs:
            if not run.running_at(now) or not any(p.requests_per_s is not None or p.latency_s is not None
                                                  for p in run.signals.phases):
                continue
            totals = self._advance(run, now)
            if serving_sample(run, k_now * self.step, k_now) is None:
                continue
            job = run.job
            owner = (f'namespace="{job.namespace}",pod="{job.name}"' if job.scheduler == "kubernetes"
                     else f'hpc_job="{job.name}"')
            model = (job.model_name or job.name).replace("\\", "\\\\").replace('"', '\\"')
            rows.append((f'engine="0",model_name="{model}",{owner}', totals))
        if not rows:
            return ""
        out = [f"# HELP {RUNNING} Number of requests in model execution batches.", f"# TYPE {RUNNING} gauge"]
        out += [f"{RUNNING}{{{labels}}} {totals.running:.6g}" for labels, totals in rows]
        out += [f"# HELP {SUCCESS} Count of successfully processed requests.", f"# TYPE {SUCCESS} counter"]
        for labels, totals in rows:
            out += [f'{SUCCESS}{{{labels},finished_reason="{reason}"}} {math.floor(totals.requests * share):d}'
                    for reason, share in FINISHED]
        out += [f"# HELP {LATENCY} Histogram of e2e request latency in seconds.", f"# TYPE {LATENCY} histogram"]
        for labels, totals in rows:
            count = math.floor(totals.requests)
            out += [f'{LATENCY}_bucket{{{labels},le="{le}"}} {min(math.floor(b), count):d}'
                    for le, b in zip(LATENCY_BUCKETS, totals.buckets, strict=True)]
            out += [f'{LATENCY}_bucket{{{labels},le="+Inf"}} {count:d}', f"{LATENCY}_sum{{{labels}}} {totals.latency_sum:.6f}",
                    f"{LATENCY}_count{{{labels}}} {count:d}"]
        return "\n".join(out) + "\n"
