"""Soak: the server's runtime sweeps a simulated week on a fast clock; growth is printed, start against end.

    .venv/bin/python -m evals.soak [--days 7] [--every 5m] [--json]

The cluster is generated: every day new jobs arrive (trainers that finish, notebooks left idle, a hung job,
an over-provisioned sweep, a periodic evaluator), some under names an earlier day used (reused names are
the rule on a real cluster), so warnings, stops, approvals (left unanswered: they expire) and audit entries
keep coming all week. The runtime is the one `steward serve` builds (stores in a fresh data dir, SQLite),
swept at the schedule's interval through `fast_forward`, the path the demo and the screenshots use.

Printed after the first simulated day (the baseline: the caches and indexes are warm) and at the end: resident
memory, open files, the data dir's size (audit, approvals, checkpoints) and the sweep time (median of that
day's sweeps). Growth should be bounded: memory and open files flat, the stores growing linearly with the
actions taken (audit retention and archiving: docs/evals.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

DAY = 86_400.0
METRICS_RETENTION_S = 2 * DAY


def week_scenario(days: int) -> dict[str, Any]:
    """A scenario dict: two pools, and each day's arrivals (some reusing yesterday's names)."""
    jobs: list[dict[str, Any]] = [
        {"id": "prod/llm-serving", "user": "svc", "project": "prod", "gpus": 4, "labels": {"tier": "production"},
         "phases": [{"gpu_util": [20, 70], "gpu_mem_gb": 60, "cpu_pct": [100, 200], "net_rx_mbps": [5, 40],
                     "log": "lines"}]},
    ]
    for d in range(days):
        t0 = d * DAY
        reused = d % 2  # every other day the notebooks come back under the same names
        jobs += [
            {"id": f"ml-team/pretrain-{d}", "user": "alice", "project": "ml-team", "gpus": 8,
             "start": f"{t0 + 3600:.0f}s", "end": f"{t0 + 9 * 3600:.0f}s",
             "phases": [{"gpu_util": [85, 98], "gpu_mem_gb": 70, "cpu_pct": [300, 600], "log": "loss"}]},
            {"id": f"research/notebook-{'bob' if reused else f'bob-{d}'}", "user": "bob", "project": "research",
             "gpus": 1, "start": f"{t0 + 2 * 3600:.0f}s", "end": f"{t0 + 20 * 3600:.0f}s",
             "phases": [{"duration": "40m", "gpu_util": [30, 80], "gpu_mem_gb": 20, "cpu_pct": [50, 120],
                         "log": "silent"},
                        {"gpu_util": 0, "cpu_pct": [0.2, 2]}]},
            {"id": f"cv-team/detector-{d}", "user": "carol", "project": "cv-team", "gpus": 4,
             "start": f"{t0 + 4 * 3600:.0f}s", "end": f"{t0 + 16 * 3600:.0f}s",
             "phases": [{"duration": "1h", "gpu_util": [80, 95], "gpu_mem_gb": 40, "cpu_pct": [200, 400],
                         "log": "loss"},
                        {"gpu_util": [97, 100], "cpu_pct": [80, 100], "gpu_work": "spin", "log": "silent"}]},
            {"id": f"research/lr-sweep-{d}", "user": "dave", "project": "research", "gpus": 4,
             "start": f"{t0 + 6 * 3600:.0f}s", "end": f"{t0 + 12 * 3600:.0f}s",
             "phases": [{"gpu_util": [60, 90], "active_gpus": 1, "gpu_mem_gb": 12, "cpu_pct": [100, 200],
                         "log": "loss"}]},
        ]
    for job in jobs:
        if "start" in job:
            job["submit"] = job["start"]  # arrives when it starts: nothing waits in the queue all week
    return {
        "version": 1, "name": "soak-week", "description": "A generated week for evals/soak.py.",
        "start": "2026-11-02T00:00:00Z", "duration": f"{days * 24}h", "step": "60s",
        "pools": [
            {"name": "a100-ondemand", "gpu_model": "A100-80GB", "gpus_per_node": 8, "nodes": 4, "min_nodes": 1,
             "max_nodes": 8, "price_per_gpu_hour": 4.1, "billing": "on-demand"},
            {"name": "h100-reserved", "gpu_model": "H100-80GB", "gpus_per_node": 8, "nodes": 2, "min_nodes": 2,
             "max_nodes": 2, "price_per_gpu_hour": 6.5, "billing": "reserved"},
        ],
        "jobs": jobs,
    }


def rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def open_files() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def dir_mb(path: Path) -> dict[str, float]:
    sizes: dict[str, float] = {}
    for f in path.rglob("*"):
        if f.is_file():
            top = f.relative_to(path).parts[0]
            sizes[top] = sizes.get(top, 0.0) + f.stat().st_size / 1e6
    return {k: round(v, 2) for k, v in sorted(sizes.items())}


def run(days: int, every_s: float) -> dict[str, Any]:
    import yaml

    from agent.api.build import simulated_runtime
    from agent.config.settings import Settings

    with tempfile.TemporaryDirectory(prefix="steward-soak-") as tmp:
        data = Path(tmp) / "data"
        scenario_file = Path(tmp) / "soak-week.yaml"
        scenario_file.write_text(yaml.safe_dump(week_scenario(days), sort_keys=False))
        settings = Settings(data_dir=data, scenario=scenario_file, leader_lock="none", sweep_every_s=every_s)
        rt = simulated_runtime(settings, speed=0, start_s=0.0)
        clock = rt.sim_clock
        assert clock is not None
        # The simulated exporter keeps two days of samples, as a Prometheus with that retention would: the
        # policy's longest lookback is one day, and without it the simulator's own caches grow all week.
        clock.cluster.keep_metrics_for(METRICS_RETENTION_S)
        points: list[dict[str, Any]] = []
        sweep_times: list[float] = []
        t = 0.0
        began = time.perf_counter()
        while t + every_s <= days * DAY:
            t += every_s
            with rt.graph_lock:
                clock.cluster.advance_to(t)
            started = time.perf_counter()
            rt.sweep_now("soak")
            sweep_times.append(time.perf_counter() - started)
            if t % DAY < every_s:  # the end of a simulated day
                day = round(t / DAY)
                points.append({"day": day, "rss_mb": round(rss_mb(), 1), "open_files": open_files(),
                               "data_mb": dir_mb(data), "audit_entries": rt.deps.audit.count(),
                               "sweep_median_s": round(statistics.median(sweep_times), 3),
                               "sweep_max_s": round(max(sweep_times), 3), "sweeps": len(sweep_times),
                               "wall_s": round(time.perf_counter() - began, 1)})
                sweep_times = []
                print(json.dumps(points[-1]), flush=True)
        return {"days": days, "every_s": every_s, "points": points}


def main(argv: list[str] | None = None) -> int:
    from core.durations import parse_duration

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7, help="simulated days (default 7)")
    parser.add_argument("--every", default="5m", help="sweep interval in cluster time (default 5m)")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON at the end")
    args = parser.parse_args(argv)
    if args.days < 2:
        parser.error("--days must be at least 2: the first day is the baseline")
    result = run(args.days, parse_duration(args.every))
    first, last = result["points"][0], result["points"][-1]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"\nafter day {first['day']} -> day {last['day']}: RSS {first['rss_mb']} -> {last['rss_mb']} MB, "
              f"open files {first['open_files']} -> {last['open_files']}, data {first['data_mb']} -> "
              f"{last['data_mb']} MB, audit entries {first['audit_entries']} -> {last['audit_entries']}, "
              f"median sweep {first['sweep_median_s']} -> {last['sweep_median_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
