"""Benchmark the PrometheusMetrics path: PromQL queries per sweep, wall time and peak memory at 1k and 10k GPUs.

A loopback fake Prometheus serves answers serialised in advance (one series per GPU, half the GPUs per job), so
the numbers are the client's: HTTP, JSON parsing and building the records. Prints numbers; asserts nothing.

    .venv/bin/python evals/bench_prometheus_sweep.py [--gpus 1000 10000] [--lookback 24h] [--slice 5m] [--flat]

A sweep reads what StewardDeps.observe reads (agent/graph/deps.py sweep_grid): fine slices over the default
detectors' windows and a coarse history over the long-tail lookback. --flat reads fine slices over the whole
lookback instead, as sweeps did before the coarse history.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.config.policy import parse_policy  # noqa: E402
from agent.graph.deps import SweepGrid, sweep_grid  # noqa: E402
from sim.fake_prometheus import FakePrometheus  # noqa: E402
from tools import promql  # noqa: E402
from tools.prometheus import PrometheusMetrics  # noqa: E402

END = datetime(2026, 11, 2, 20, 0, tzinfo=UTC)


def _gpu_labels(i: int) -> str:
    node, g = divmod(i, 8)
    job = i // 2  # two GPUs per job; every tenth job runs under Slurm
    pod = f'"namespace":"team-{job % 40}","pod":"job-{job}"' if job % 10 else f'"hpc_job":"{100000 + job}"'
    return (f'{{"Hostname":"node-{node}","gpu":"{g}","UUID":"GPU-{i:08d}","modelName":"NVIDIA H100 80GB HBM3",'
            f'{pod}}}')


def _answer(path: str, params: dict[str, str], series: list[str], value_of) -> bytes:
    if path.endswith("query_range"):
        start, step, end = float(params["start"]), float(params["step"]), float(params["end"])
        n = round((end - start) / step) + 1
        rows = []
        for i, labels in enumerate(series):
            points = ",".join(f'[{start + k * step:.3f},"{value_of(i, k)}"]' for k in range(n))
            rows.append(f'{{"metric":{labels},"values":[{points}]}}')
        kind = "matrix"
    else:
        t = float(params["time"])
        rows = [f'{{"metric":{labels},"value":[{t:.3f},"{value_of(i, 0)}"]}}' for i, labels in enumerate(series)]
        kind = "vector"
    return f'{{"status":"success","data":{{"resultType":"{kind}","result":[{",".join(rows)}]}}}}'.encode()


# What each GPU's DCGM profiling fields, power and interconnect report (a busy H100 training job).
PROFILING_VALUES = {"engine": 0.5, "sm_active": 0.6, "tensor_active": 0.3, "dram_active": 0.3, "power_w": 450.0,
                    "nvlink": 1e10, "pcie": 1e9}
FIELDS = list(promql.PROFILING_FIELDS)


def tagged(series: list[str], fields: list[str] = FIELDS) -> list[str]:
    """Each series once per field (DCGM's by default), tagged as a tagged_union's answer tags it (the one profiling
    query's, the one disk read+write query's), in field-major order."""
    return [f'{labels[:-1]},"{promql.FIELD_LABEL}":"{field}"}}' for field in fields for labels in series]


def _grid(lookback: float, slice_s: float) -> dict[str, str]:
    n = max(round(lookback / slice_s), 1)
    t_end = END.timestamp()
    return {"start": f"{t_end - (n - 1) * slice_s:.3f}", "end": f"{t_end:.3f}", "step": f"{slice_s:g}"}


def build_answers(gpus: int, grid: SweepGrid) -> dict[str, bytes]:
    """Every query a sweep sends, answered in advance (the server then only copies bytes)."""
    gpu_series = [_gpu_labels(i) for i in range(gpus)]
    jobs = sorted({json.dumps({k: v for k, v in json.loads(s).items() if k in promql.JOB_KEYS}, separators=(",", ":"))
                   for s in gpu_series})
    lookback, slice_s = grid.lookback_s, grid.slice_s
    n = max(round(lookback / slice_s), 1)
    t_end = END.timestamp()
    rng = _grid(lookback, slice_s)
    inst = {"time": f"{t_end:.3f}"}
    util = lambda i, k: (i * 7 + k) % 100  # noqa: E731
    values = {"util_max": util, "util_min": util, "util_avg": util, "util_count": lambda i, k: 10,
              "xid_last": lambda i, k: 0, "fb_used": lambda i, k: 40960,
              "temp_max": lambda i, k: 60, "power_avg": lambda i, k: 300, "last_seen": lambda i, k: t_end}
    answers = {}
    for name, q in promql.gpu_range_queries("", slice_s).items():
        if name == "profiling":
            answers[q] = _answer("query_range", rng, tagged(gpu_series),
                                 lambda j, k: PROFILING_VALUES[FIELDS[j // gpus]])
        else:
            answers[q] = _answer("query_range", rng, gpu_series, values[name])
    for name, q in promql.gpu_instant_queries("", n * slice_s).items():
        answers[q] = _answer("query", inst, gpu_series, values[name])
    if grid.history_lookback_s:
        coarse = _grid(grid.history_lookback_s, grid.history_slice_s)
        for name, q in promql.gpu_history_queries("", grid.history_slice_s).items():
            answers[q] = _answer("query_range", coarse, gpu_series, values[name])
    io = promql.job_io_queries("", promql.DEFAULT_CONTAINER_SELECTOR, promql.DEFAULT_NETWORK_SELECTOR, slice_s)
    for name, q in io.items():  # disk: read and write in one answer, each series tagged with its field
        answers[q] = _answer("query_range", rng, tagged(jobs, list(promql.DISK_FIELDS)) if name == "disk" else jobs,
                             lambda i, k: 1.5)
    return answers


def _sweep(metrics: PrometheusMetrics, grid: SweepGrid) -> tuple[list, list, list]:
    history = (metrics.gpu_history(END, grid.history_lookback_s, grid.history_slice_s)
               if grid.history_lookback_s else [])
    return (metrics.gpu_series(END, grid.lookback_s, grid.slice_s),
            metrics.job_io_series(END, grid.lookback_s, grid.slice_s), history)


def run(gpus: int, grid: SweepGrid) -> dict[str, float]:
    answers = build_answers(gpus, grid)
    with FakePrometheus(lambda path, params: answers[params["query"]]) as fake:
        metrics = PrometheusMetrics(fake.url, job_id_for_hpc_job=lambda j: f"gpu-long/{j}", sample_interval_s=30)
        t0 = time.perf_counter()
        series, io, history = _sweep(metrics, grid)
        wall = time.perf_counter() - t0
        queries = metrics.queries
        del series[:], io[:], history[:]
        # A second sweep under tracemalloc for the peak (tracemalloc slows Python down, so it is not timed).
        tracemalloc.start()
        kept = _sweep(metrics, grid)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {"gpus": gpus, "series": len(kept[0]), "jobs": len(kept[1]), "queries": queries, "wall_s": wall,
            "peak_mb": peak / 1e6, "payload_mb": sum(len(a) for a in answers.values()) / 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--lookback", default="24h", help="long-tail lookback (default 24h, the default policy's)")
    parser.add_argument("--slice", default="5m", help="slice width (default 5m, the default policy's)")
    parser.add_argument("--history-slice", default="15m", help="coarse slice (default 15m, the default policy's)")
    parser.add_argument("--flat", action="store_true", help="fine slices over the whole lookback (the old sweep)")
    args = parser.parse_args()
    policy = parse_policy({"detectors": {"slice": args.slice, "longtail": {
        "lookback": args.lookback, "history_slice": args.history_slice}}}, "bench policy")
    grid = sweep_grid(policy)
    if args.flat:
        grid = SweepGrid(grid.slice_s, policy.detectors.longtail.lookback, grid.slice_s, 0.0)
    coarse = (f" + coarse {grid.history_lookback_s / 3600:g}h / {grid.history_slice_s / 60:g}m "
              f"({round(grid.history_lookback_s / grid.history_slice_s)} slices)" if grid.history_lookback_s else "")
    print(f"PrometheusMetrics sweep: fine {grid.lookback_s / 60:g}m / {grid.slice_s / 60:g}m "
          f"({round(grid.lookback_s / grid.slice_s)} slices){coarse}, loopback fake Prometheus")
    print(f"{'GPUs':>7} {'jobs':>6} {'queries':>8} {'payload MB':>11} {'wall s':>8} {'peak MB':>8}")
    for gpus in args.gpus:
        r = run(gpus, grid)
        print(f"{r['gpus']:>7} {r['jobs']:>6} {r['queries']:>8} {r['payload_mb']:>11.1f} {r['wall_s']:>8.2f} "
              f"{r['peak_mb']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
