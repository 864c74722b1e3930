"""Benchmark a whole sweep over the real adapters: 10,000 GPUs and 5,000 pods, Prometheus and Kubernetes.

The Kubernetes API server and Prometheus are loopback fakes speaking the real protocols (the
`kubernetes` client and prometheus-api-client are the real ones), so the numbers are the
agent's own: PromQL queries and Kubernetes API calls per sweep, wall time and peak memory.
Every tenth job is quiet, so the sweep also reads logs, warns and audits. Prints numbers; asserts nothing.

    .venv/bin/python evals/bench_cluster_sweep.py [--gpus 1000 10000] [--lookback 6h]
"""

from __future__ import annotations

import argparse
import re
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.config.policy import parse_policy  # noqa: E402
from agent.config.settings import Settings  # noqa: E402
from agent.graph.deps import (  # noqa: E402
    StewardDeps,  # noqa: E402
    SweepGrid,
    sweep_grid,
)
from agent.graph.service import SweepService  # noqa: E402
from agent.planning.policy_model import PolicyModel  # noqa: E402
from agent.records.approvals import ApprovalStore  # noqa: E402
from agent.records.audit import AuditLog  # noqa: E402
from agent.wiring import NoPools  # noqa: E402
from evals.bench_prometheus_sweep import END, FIELDS, _answer, _grid, tagged  # noqa: E402
from sim.fake_prometheus import FakePrometheus  # noqa: E402
from tests.k8s_fake_api import FakeKubernetesApi  # noqa: E402
from tests.k8s_fake_cluster import gpu_node, gpu_pod  # noqa: E402
from tools import promql  # noqa: E402
from tools.k8s_notify import KubernetesEventNotifier  # noqa: E402
from tools.kubernetes import kubernetes_scheduler_from_settings  # noqa: E402
from tools.prometheus import PrometheusMetrics  # noqa: E402

GPUS_PER_NODE, GPUS_PER_JOB = 8, 2


class MovingClock:
    """A wall clock, sped up: every read is a second later. The sweep observes at END; every decision and
    action after it happens later, so nothing can lean on "no time has passed" to skip a fresh read."""

    def __init__(self) -> None:
        self.reads = 0

    def now(self):  # noqa: ANN201
        self.reads += 1
        return END + timedelta(seconds=self.reads - 1)


SCOPED = re.compile(r'namespace="team-(\d+)", pod="job-(\d+)"')


def _labels(gpu: int) -> str:
    node, g = divmod(gpu, GPUS_PER_NODE)
    job = gpu // GPUS_PER_JOB
    return (f'{{"Hostname":"node-{node}","gpu":"{g}","UUID":"GPU-{gpu:08d}","modelName":"NVIDIA H100 80GB HBM3",'
            f'"namespace":"team-{job % 40}","pod":"job-{job}"}}')


def _answers(gpus: int, grid: SweepGrid) -> tuple[dict[str, bytes], Callable[[str, dict[str, str]], bytes]]:
    """Every job busy, except every tenth: quiet for the whole lookback (so idle findings, logs, warnings).

    The sweep's queries are answered in advance; a re-read of one job (its pod matchers in the query, at a
    later instant) is answered on the fly from the same numbers, for that job's two GPUs only."""
    series = [_labels(i) for i in range(gpus)]
    jobs = sorted({f'{{"namespace":"team-{j % 40}","pod":"job-{j}"}}' for j in range(gpus // GPUS_PER_JOB)})
    slice_s = grid.slice_s
    n = max(round(grid.lookback_s / slice_s), 1)
    t_end = END.timestamp()
    rng = _grid(grid.lookback_s, slice_s)
    inst = {"time": f"{t_end:.3f}"}
    expected = slice_s / 30

    def util(i: int, k: int) -> float:
        return 0 if (i // GPUS_PER_JOB) % 10 == 0 else 60 + (i * 7 + k) % 30

    def activity(field: str, i: int, k: int) -> float:
        """A GPU's DCGM profiling fields: in proportion to its utilisation; idle power when quiet."""
        u = util(i, k) / 100
        return 60 + 500 * u if field == "power_w" else u * (1e9 if field.startswith(("nvlink", "pcie")) else 0.8)

    values = {"util_max": util, "util_min": util, "util_avg": util, "util_count": lambda i, k: expected,
              "xid_last": lambda i, k: 0,
              "fb_used": lambda i, k: 40960, "temp_max": lambda i, k: 60, "power_avg": lambda i, k: 300,
              "last_seen": lambda i, k: t_end}
    ranges = promql.gpu_range_queries("", slice_s)
    profiling = ranges.pop("profiling")
    answers = {q: _answer("query_range", rng, series, values[name]) for name, q in ranges.items()}
    answers[profiling] = _answer("query_range", rng, tagged(series),
                                 lambda j, k: activity(FIELDS[j // gpus], j % gpus, k))
    answers |= {q: _answer("query", inst, series, values[name])
                for name, q in promql.gpu_instant_queries("", n * slice_s).items()}
    if grid.history_lookback_s:
        coarse = _grid(grid.history_lookback_s, grid.history_slice_s)
        history = {"util_count": lambda i, k: grid.history_slice_s / 30}
        answers |= {q: _answer("query_range", coarse, series, history.get(name, values.get(name, util)))
                    for name, q in promql.gpu_history_queries("", grid.history_slice_s).items()}
    io = promql.job_io_queries("", promql.DEFAULT_CONTAINER_SELECTOR, promql.DEFAULT_NETWORK_SELECTOR, slice_s)
    disk = list(promql.DISK_FIELDS)  # the disk query's answer: read and write, each series tagged with its field
    answers |= {q: _answer("query_range", rng, tagged(jobs, disk) if name == "disk" else jobs, lambda i, k: 0.0)
                for name, q in io.items()}
    fns = {q: values[name] for name, q in ranges.items()}
    fns |= {q: values[name] for name, q in promql.gpu_instant_queries("", n * slice_s).items()}
    if grid.history_lookback_s:
        fns |= {q: history.get(name, values.get(name, util))
                for name, q in promql.gpu_history_queries("", grid.history_slice_s).items()}
    io_base = set(io.values())

    def scoped(path: str, params: dict[str, str]) -> bytes:
        query = params["query"]
        found = SCOPED.search(query)
        if found is None:
            raise ValueError(f"unexpected query {query}")
        base = query.replace(found.group(0) + ", ", "").replace(found.group(0), "").replace("{}", "")
        job = int(found.group(2))
        if base in io_base:
            owner = [f'{{"namespace":"team-{job % 40}","pod":"job-{job}"}}']
            return _answer(path, params, tagged(owner, disk) if base == io["disk"] else owner, lambda i, k: 0.0)
        gpu_ids = [job * GPUS_PER_JOB + g for g in range(GPUS_PER_JOB)]
        if base == profiling:
            return _answer(path, params, tagged([_labels(i) for i in gpu_ids]),
                           lambda j, k: activity(FIELDS[j // GPUS_PER_JOB], gpu_ids[j % GPUS_PER_JOB], k))
        fn = fns[base]
        return _answer(path, params, [_labels(i) for i in gpu_ids], lambda i, k: fn(gpu_ids[i], k))

    return answers, scoped


def run(gpus: int, lookback: str, tmp: Path) -> dict[str, float]:
    policy = parse_policy({"detectors": {"longtail": {"lookback": lookback}}})
    answers, scoped = _answers(gpus, sweep_grid(policy))
    api = FakeKubernetesApi().start()
    try:
        for n in range(gpus // GPUS_PER_NODE):
            api.store.put("nodes", gpu_node(f"node-{n}", GPUS_PER_NODE))
        for j in range(gpus // GPUS_PER_JOB):
            api.store.put("pods", gpu_pod(f"team-{j % 40}", f"job-{j}", GPUS_PER_JOB,
                                          node=f"node-{j * GPUS_PER_JOB // GPUS_PER_NODE}",
                                          labels={"steward.io/owner": f"user-{j % 97}"}))
        with FakePrometheus(lambda path, params: answers.get(params["query"]) or scoped(path, params)) as prometheus:
            settings = Settings(kubeconfig=api.write_kubeconfig(tmp / f"kubeconfig-{gpus}"), data_dir=tmp)
            clock = MovingClock()
            k8s = kubernetes_scheduler_from_settings(settings, clock=clock)
            metrics = PrometheusMetrics(prometheus.url, sample_interval_s=30)
            audit = AuditLog(":memory:")
            notifier = KubernetesEventNotifier(k8s.core, notice_s=1800, clock=clock)
            deps = StewardDeps(metrics=metrics, scheduler=k8s, logs=k8s, pools=NoPools(), notifier=notifier,
                               clock=clock, policy=policy, audit=audit, approvals=ApprovalStore(":memory:", audit),
                               planner=PolicyModel())
            service = SweepService(deps)
            before = len(api.requests)
            t0 = time.perf_counter()
            result = service.sweep(trigger="bench")
            wall = time.perf_counter() - t0
            calls = api.requests[before:]
            warned = len(audit.entries(kind="execution", status="executed", limit=100_000))
    finally:
        api.stop()
    reads = sum(1 for m, _, _ in calls if m == "GET")
    return {"gpus": gpus, "jobs": gpus // GPUS_PER_JOB, "promql": metrics.queries, "k8s_calls": len(calls),
            "k8s_lists": sum(1 for m, p, _ in calls if m == "GET" and p in ("/api/v1/pods", "/api/v1/nodes")),
            "k8s_reads": reads, "k8s_writes": len(calls) - reads, "findings": len(result.state.get("findings", [])),
            "warned": warned,
            "wall_s": wall, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--lookback", default="24h", help="long-tail lookback (default 24h, the default policy's)")
    args = parser.parse_args()
    print(f"One sweep over PrometheusMetrics + KubernetesScheduler (loopback fakes), long-tail lookback "
          f"{args.lookback}; a tenth of the jobs idle, so logs are read and owners warned; the clock moves "
          f"a second on every read")
    print(f"{'GPUs':>7} {'pods':>6} {'PromQL':>7} {'k8s calls':>9} {'lists':>6} {'other reads':>11} "
          f"{'writes':>7} {'findings':>8} {'warned':>6} {'wall s':>7} {'max RSS MB':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in args.gpus:
            r = run(gpus, args.lookback, Path(tmp))
            print(f"{r['gpus']:>7} {r['jobs']:>6} {r['promql']:>7} {r['k8s_calls']:>9} {r['k8s_lists']:>6} "
                  f"{r['k8s_reads'] - r['k8s_lists']:>11} {r['k8s_writes']:>7} {r['findings']:>8} {r['warned']:>6} "
                  f"{r['wall_s']:>7.1f} {r['maxrss_mb']:>10.0f}")
    print("lists stay at 3 per sweep (pods, ended pods, nodes); other reads are one log read per quiet job, plus per action\n"
          "a get of the target and its own log; PromQL is the sweep's 17 plus, per action, the target's own window\n"
          "(its pod's series only); writes are the warnings (annotation patch + Event).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
