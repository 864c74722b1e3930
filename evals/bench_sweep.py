"""Sweep cost at 1k / 10k / 50k GPUs, and trace replay speed; prints numbers, asserts nothing.

    .venv/bin/python -m evals.bench_sweep [--sizes 1000,10000,50000] [--trace PATH] [--day GPUS]

Each size runs in its own process so peak memory (ru_maxrss) is that size's alone. The cluster
is a synthetic trace (one GPU per container, a sample per 5 minutes over a day, 5% idle for the
last 3 hours, the rest busy or bursty) behind the same TraceCluster the replay uses.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from agent.config.policy import Policy
from evals.trace import ContainerTrace, Trace

DAY = 24 * 3600.0
STEP = 300.0


def synthetic_trace(gpus: int, seed: int = 7) -> Trace:
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, DAY + 1, STEP)
    containers = {}
    mem = np.full(len(t), 20480.0)
    for i in range(gpus):
        kind = i % 20
        if kind == 0:  # idle for the last 3 hours
            util = np.where(t < DAY - 3 * 3600, rng.uniform(40, 90, len(t)), 0.0)
        elif kind < 8:  # bursty service
            util = np.where(rng.random(len(t)) < 0.3, rng.uniform(20, 80, len(t)), 0.0)
        else:
            util = rng.uniform(30, 95, len(t))
        cid = f"c{i:06d}"
        containers[cid] = ContainerTrace(id=cid, t=t, util=util, mem_mb=mem)
    return Trace(path=f"synthetic-{gpus}", start_epoch=1.7e9, duration_s=DAY, interval_s=STEP,
                 containers=containers, columns={}, rows=gpus * len(t))


def prompt_size(findings: list, obs, deps) -> int:
    """What the LLM planner would send: its costliest findings (the rest go to the policy model)."""
    from agent.planning.llm_planner import LLMPlanner, split_for_model

    planner = LLMPlanner(model=None)  # type: ignore[arg-type]
    for_model, _ = split_for_model(findings, planner.max_findings)
    messages = planner._messages(for_model, obs, deps.audit.history(obs.at), deps, "")
    return sum(len(str(m.content)) for m in messages)


def one_size(gpus: int) -> dict:
    from agent.detectors.engine import run_detectors
    from agent.graph.service import SweepService
    from evals.replay import trace_deps

    started = time.perf_counter()
    trace = synthetic_trace(gpus)
    built = time.perf_counter() - started
    deps, cluster = trace_deps(trace, Policy())
    cluster.advance_to(DAY)
    t0 = time.perf_counter()
    obs = deps.observe()
    observe_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    findings = run_detectors(obs, deps.policy)
    detect_s = time.perf_counter() - t0
    chars = prompt_size(findings, obs, deps)
    calls, found = obs.backend_calls, len(findings)
    del obs, findings  # the timing observation goes before the sweep takes its own, as in production
    service = SweepService(deps, run_prefix="bench")
    t0 = time.perf_counter()
    result = service.sweep(trigger="bench")
    sweep_s = time.perf_counter() - t0
    plan = result.state.get("plan", {})
    return {"gpus": gpus, "build_trace_s": round(built, 2), "observe_s": round(observe_s, 2),
            "detect_s": round(detect_s, 2), "full_sweep_s": round(sweep_s, 2),
            "backend_calls": calls, "findings": found,
            "actions": len(result.state.get("outcomes", [])),
            "llm_tokens": int(plan.get("prompt_tokens", 0)) + int(plan.get("completion_tokens", 0)),
            "prompt_chars": chars, "prompt_tokens_est": chars // 4,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def evening_lull_trace(gpus: int, seed: int = 11) -> Trace:
    """A day in which half the containers go quiet for good at a random hour (a fleet emptying into the night), the
    rest bursty: warnings, stops and rate-limited stops pile up in the audit log as the day goes on."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, DAY + 1, STEP)
    containers = {}
    mem = np.full(len(t), 20480.0)
    for i in range(gpus):
        util = np.where(rng.random(len(t)) < 0.4, rng.uniform(20, 90, len(t)), 0.0)
        if i % 2 == 0:
            util[t >= rng.uniform(0.25, 0.9) * DAY] = 0.0
        cid = f"c{i:06d}"
        containers[cid] = ContainerTrace(id=cid, t=t, util=util, mem_mb=mem)
    return Trace(path=f"evening-lull-{gpus}", start_epoch=1.7e9, duration_s=DAY, interval_s=STEP,
                 containers=containers, columns={}, rows=gpus * len(t))


def day_growth(gpus: int, every_h: float = 4.0) -> list[dict]:
    """One sweep every 5 minutes over `evening_lull_trace`, timed: does a sweep late in the day, with the day's
    warnings, stops and refusals in the audit log, cost more than one in the morning?"""
    from agent.graph.service import SweepService
    from evals.replay import sweep_times, trace_deps

    trace = evening_lull_trace(gpus)
    deps, cluster = trace_deps(trace, Policy(), None)
    service = SweepService(deps, run_prefix="bench")
    rows = []
    for t in sweep_times(trace, STEP):
        cluster.advance_to(float(t))
        started = time.perf_counter()
        service.sweep(trigger="bench")
        wall = time.perf_counter() - started
        if t % (every_h * 3600) < STEP:
            rows.append({"hour": round(t / 3600, 1), "sweep_s": round(wall, 2), "stops": len(cluster.stops),
                         "audit_rows": deps.audit.count()})
    return rows


def replay_speed(path: Path) -> dict:
    from evals.replay import run_agent
    from evals.trace import load_trace

    trace = load_trace(path)
    run = run_agent(trace, Policy())
    hours = trace.duration_s / 3600
    return {"trace": str(path), "containers": len(trace.containers), "simulated_hours": round(hours, 1),
            "sweeps": run.sweeps, "agent_wall_s": round(run.wall_s, 2),
            "simulated_hours_per_s": round(hours / run.wall_s, 2), "backend_calls": run.backend_calls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--trace", type=Path, default=Path("../shared/data/traces/genai-pod-gpu-dev.csv.gz"))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--day", type=int, help="instead: a day of sweeps over this many GPUs, half going quiet, "
                                                "timed every 4 h (does a late sweep cost more?)")
    args = parser.parse_args(argv)
    if args.day:
        print(f"A day of 5-minute sweeps over {args.day} GPUs, half going quiet for good at a random hour:")
        print(f"{'hour':>5} {'sweep s':>8} {'stops':>6} {'audit rows':>10}")
        for r in day_growth(args.day):
            print(f"{r['hour']:>5} {r['sweep_s']:>8.2f} {r['stops']:>6} {r['audit_rows']:>10}", flush=True)
        return 0
    if args.child:
        print(json.dumps(one_size(args.child)))
        return 0
    header = (f"{'GPUs':>6} {'observe s':>9} {'detect s':>8} {'sweep s':>8} {'peak MB':>8} {'calls':>6} "
              f"{'findings':>8} {'actions':>7} {'LLM tok':>7} {'prompt chars':>12} {'~tokens':>8}")
    print("One sweep (observe -> detect -> plan -> guardrail -> execute) with the default policy, "
          "deterministic planner:")
    print(header)
    for size in (int(s) for s in args.sizes.split(",")):
        out = subprocess.run([sys.executable, "-m", "evals.bench_sweep", "--child", str(size)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['gpus']:>6} {r['observe_s']:>9.2f} {r['detect_s']:>8.2f} {r['full_sweep_s']:>8.2f} "
              f"{r['peak_rss_mb']:>8.0f} {r['backend_calls']:>6} {r['findings']:>8} {r['actions']:>7} "
              f"{r['llm_tokens']:>7} {r['prompt_chars']:>12} {r['prompt_tokens_est']:>8}", flush=True)
    if args.trace.exists():
        r = replay_speed(args.trace)
        print(f"\nReplay: {r['containers']} containers, {r['simulated_hours']} h in {r['sweeps']} sweeps: "
              f"{r['agent_wall_s']} s = {r['simulated_hours_per_s']} simulated hours per second "
              f"({r['backend_calls']} backend calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
