"""`steward replay TRACE`: the agent and two baselines over a recorded GPU trace, side by side."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from agent.config.policy import load_policy
from evals.replay import run_agent, run_jds, run_naive
from evals.replay_score import ACTIVE_PCT, Oracle, PolicyScore, oracle, score
from evals.trace import Trace, TraceError, load_trace


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.0f} min"


def replay(trace: Trace, policy_file: Path | None, every: float) -> tuple[Oracle, list[PolicyScore], list[Any]]:
    policy = load_policy(policy_file)
    name = f"agent ({policy_file.name})" if policy_file else "agent (default policy)"
    runs = [run_agent(trace, policy, every=every, name=name), run_naive(trace, every=every), run_jds(trace, every=every)]
    best = oracle(trace)
    return best, [score(trace, r, best) for r in runs], runs


def print_table(trace: Trace, best: Oracle, scores: list[PolicyScore], wall_s: float) -> None:
    n_ended = sum(1 for c in trace.containers.values() if trace.ended_inside(c))
    print(f"Trace {trace.path}: {len(trace.containers)} containers, {trace.rows} samples every "
          f"{trace.interval_s:.0f} s over {trace.duration_s / 3600:.1f} h; {n_ended} really ended inside it")
    print(f"Oracle (final idle tails, the most any policy could reclaim without a false kill): {best.total:.1f} GPU-h"
          f" = {best.cut_off_gpu_hours:.1f} cut off by the trace end ({best.cut_off_tails} tails)"
          f" + {best.ended_gpu_hours:.1f} before containers really ended ({best.ended_tails} tails)")
    header = (f"{'policy':<52} {'reclaimed GPU-h':>15} {'of oracle':>9} {'false kills':>11} {'notifications':>13} "
              f"{'to warning':>10} {'to stop':>9}")
    print(header)
    print("-" * len(header))
    for s in scores:
        print(f"{s.name:<52} {s.reclaimed_gpu_hours:>15.1f} {s.share_of_oracle:>9.1%} {s.false_kills:>11} "
              f"{s.notifications:>13} {_minutes(s.median_to_warning_s):>10} {_minutes(s.median_to_stop_s):>9}")
    print(f"False kill: a stop after which the container shows util > {ACTIVE_PCT:g}% in any later sample; "
          "false kills reclaim nothing. Times are medians from the start of the idle tail.")
    for s in scores:
        split = f"{s.reclaimed_cut_off:.1f} of cut-off tails + {s.reclaimed_ended:.1f} of ended tails"
        print(f"  {s.name}: {s.stops} stops, {split}" + (f"; false kills: {', '.join(s.false_kill_containers[:8])}"
                                                          + (" ..." if s.false_kills > 8 else "")
                                                          if s.false_kills else ""))
    agent_s = scores[0].wall_s
    print(f"Replayed in {wall_s:.1f} s; the agent's sweeps took {agent_s:.1f} s "
          f"({trace.duration_s / 3600 / max(agent_s, 1e-9):.1f} simulated hours per second).")


def cmd_replay(args: argparse.Namespace, settings: Any) -> int:
    started = time.perf_counter()
    try:
        trace = load_trace(args.trace, id_col=args.id_col, time_col=args.time_col, util_col=args.util_col,
                           mem_col=args.mem_col)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    best, scores, runs = replay(trace, args.policy, args.every)
    wall = time.perf_counter() - started
    if args.html:
        from evals.replay_html import write_html

        write_html(args.html, trace, best, scores, runs)
    if args.json:
        print(json.dumps({"trace": trace.path, "containers": len(trace.containers), "columns": trace.columns,
                          "oracle": {**best.model_dump(), "total": best.total}, "false_kill_util_above_pct": ACTIVE_PCT,
                          "policies": [s.model_dump(exclude={"curve"}) for s in scores], "wall_s": round(wall, 2)},
                         indent=2))
    else:
        print_table(trace, best, scores, wall)
        if args.html:
            print(f"HTML report: {args.html}")
    return 0


def register_cli(subparsers: Any) -> None:
    from agent.cli.main import _duration

    p = subparsers.add_parser("replay", help="replay a recorded GPU trace: agent vs baselines, scored on the future")
    p.add_argument("trace", type=Path, help="CSV (or .csv.gz): container id, timestamp (s), GPU util %%, [memory]")
    p.add_argument("--policy", type=Path, help="policy file for the agent (default: built-in defaults)")
    p.add_argument("--every", type=_duration, default=300.0, help="sweep interval (default 5m)")
    p.add_argument("--id-col", help="container id column (default: auto-detect)")
    p.add_argument("--time-col", help="timestamp column, seconds (default: auto-detect)")
    p.add_argument("--util-col", help="GPU utilisation %% column (default: auto-detect)")
    p.add_argument("--mem-col", help="GPU memory column, bytes or MB (default: auto-detect, optional)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--html", type=Path, help="also write a self-contained HTML report here")
    p.set_defaults(handler=cmd_replay)
