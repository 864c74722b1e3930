"""`steward replay TRACE`: the agent and the baseline rules over a recorded GPU trace, side by side.

`--frontier` runs each baseline family across its knob and the agent across its main knobs instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from agent.config.policy import Policy, PolicyError, load_policy
from evals.replay import PolicyRun, run_agent, run_jds, run_naive, run_zero
from evals.replay_frontier import AGENT_KNOBS, Frontier, run_frontier
from evals.replay_score import (
    ACTIVE_PCT,
    MATERIAL_WORK_GPU_S,
    Oracle,
    PolicyScore,
    actions_listing,
    oracle,
    score,
)
from evals.trace import Trace, TraceError, load_trace

ZERO_BASELINE_S = 2 * 3600.0  # the all-zero rule shown next to the agent in the plain replay


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.0f} min"


def replay(trace: Trace, policy: Policy, name: str, every: float
           ) -> tuple[Oracle, Oracle, list[PolicyScore], list[PolicyRun]]:
    runs = [run_agent(trace, policy, every=every, name=name), run_naive(trace, every=every),
            run_zero(trace, every=every, window_s=ZERO_BASELINE_S), run_jds(trace, every=every)]
    best, strict = oracle(trace, "material"), oracle(trace, "strict")
    return best, strict, [score(trace, r, best) for r in runs], runs


def _trace_line(trace: Trace) -> str:
    n_ended = sum(1 for c in trace.containers.values() if trace.ended_inside(c))
    reused = (f" ({trace.reused} id(s) taken over by a new container after a hole: split, evals/trace.py "
              "split_reused)" if trace.reused else "")
    dups = (f" ({trace.duplicates} repeated (container, timestamp) row(s) read as one sample)"
            if trace.duplicates else "")
    return (f"Trace {trace.path}: {len(trace.containers)} containers{reused}, {trace.rows} samples"
            f"{dups} every {trace.interval_s:.0f} s over {trace.duration_s / 3600:.1f} h; {n_ended} really ended "
            "inside it")


def _oracle_lines(best: Oracle, strict: Oracle) -> list[str]:
    return [f"Oracle, material (final idle tails after the last {MATERIAL_WORK_GPU_S:g} GPU-s of work, the most any "
            f"policy could reclaim without losing real work): {best.total:.1f} GPU-h = {best.cut_off_gpu_hours:.1f} "
            f"cut off by the trace end ({best.cut_off_tails} tails) + {best.ended_gpu_hours:.1f} before containers "
            f"really ended ({best.ended_tails} tails)",
            f"Oracle, strict (final idle tails after the last non-zero sample): {strict.total:.1f} GPU-h = "
            f"{strict.cut_off_gpu_hours:.1f} cut off ({strict.cut_off_tails} tails) + {strict.ended_gpu_hours:.1f} "
            f"ended ({strict.ended_tails} tails)"]


def _definition() -> str:
    return (f"Material false kill: the container later did >= {MATERIAL_WORK_GPU_S:g} GPU-s of work (sum util/100 x "
            f"sample interval); it reclaims nothing. Strict: any later util > {ACTIVE_PCT:g}%; a strict-only stop "
            "reclaims its tail less the work it lost. 'strict GPU-h': every strict false kill reclaims nothing.")


def _list(names: list[str], limit: int = 8) -> str:
    return ", ".join(names[:limit]) + (" ..." if len(names) > limit else "")


def print_table(trace: Trace, best: Oracle, strict: Oracle, scores: list[PolicyScore], wall_s: float) -> None:
    print(_trace_line(trace))
    for line in _oracle_lines(best, strict):
        print(line)
    header = (f"{'policy':<52} {'GPU-h':>6} {'of oracle':>9} {'material FK':>11} {'strict FK':>9} "
              f"{'strict GPU-h':>12} {'notifications':>13} {'to warning':>10} {'to stop':>9}")
    print(header)
    print("-" * len(header))
    for s in scores:
        print(f"{s.name:<52} {s.reclaimed_gpu_hours:>6.1f} {s.share_of_oracle:>9.1%} {s.material_false_kills:>11} "
              f"{s.strict_false_kills:>9} {s.reclaimed_strict_gpu_hours:>12.1f} {s.notifications:>13} "
              f"{_minutes(s.median_to_warning_s):>10} {_minutes(s.median_to_stop_s):>9}")
    print(_definition() + " Times are medians from the start of the idle stretch.")
    for s in scores:
        split = f"{s.reclaimed_cut_off:.1f} of cut-off tails + {s.reclaimed_ended:.1f} of ended tails"
        kills = ""
        if s.material_false_kills:
            kills += f"; material false kills: {_list(s.material_false_kill_containers)}"
        strict_only = sorted(set(s.strict_false_kill_containers) - set(s.material_false_kill_containers))
        if strict_only:
            kills += f"; strict-only: {_list(strict_only)}"
        print(f"  {s.name}: {s.stops} stops, {split}, {s.work_lost_gpu_s / 60:.1f} GPU-min of work lost{kills}")
    agent_s = scores[0].wall_s
    print(f"Replayed in {wall_s:.1f} s; the agent's sweeps took {agent_s:.1f} s "
          f"({trace.duration_s / 3600 / max(agent_s, 1e-9):.1f} simulated hours per second).")


def print_frontier(trace: Trace, frontier: Frontier, jobs: int) -> None:
    from evals.replay_html import verdict_text

    print(_trace_line(trace))
    for line in _oracle_lines(frontier.material, frontier.strict):
        print(line)
    header = (f"{'family':<6} {'knobs':<38} {'GPU-h':>6} {'of oracle':>9} {'material FK':>11} {'strict FK':>9} "
              f"{'strict GPU-h':>12} {'stops':>5} {'warnings':>8}  frontier")
    print(header)
    print("-" * len(header))
    for p in frontier.points:
        s = p.score
        knobs = p.knobs + (" [DEFAULT]" if p.default else "")
        print(f"{p.family:<6} {knobs:<38} {s.reclaimed_gpu_hours:>6.1f} {s.share_of_oracle:>9.1%} "
              f"{s.material_false_kills:>11} {s.strict_false_kills:>9} {s.reclaimed_strict_gpu_hours:>12.1f} "
              f"{s.stops:>5} {s.notifications:>8}  {'*' if p.on_frontier else ''}")
    print(_definition() + " *: on its family's Pareto frontier.")
    print(verdict_text(frontier))
    agents = frontier.family("agent")
    print(f"Frontier run in {frontier.wall_s:.1f} s: {len(agents)} agent points in {frontier.agent_wall_s:.1f} s "
          f"({jobs} process{'es' if jobs > 1 else ''}; each point "
          f"{min(p.score.wall_s for p in agents):.1f}-{max(p.score.wall_s for p in agents):.1f} s), "
          f"{len(frontier.points) - len(agents)} baseline points in "
          f"{sum(p.score.wall_s for p in frontier.points if p.family != 'agent'):.1f} s.")


def _point_doc(trace: Trace, run: PolicyRun, s: PolicyScore) -> dict[str, Any]:
    """The score, with `stops` and `warnings` listed one by one (the stop count is the list's length)."""
    return {**s.model_dump(exclude={"curve", "stops"}), **actions_listing(trace, run)}


def _frontier_doc(trace: Trace, frontier: Frontier, wall: float) -> dict[str, Any]:
    v = frontier.verdict()
    return {
        "trace": trace.path, "containers": len(trace.containers), "material_work_gpu_s": MATERIAL_WORK_GPU_S,
        "oracle": {"material": {**frontier.material.model_dump(), "total": frontier.material.total},
                   "strict": {**frontier.strict.model_dump(), "total": frontier.strict.total}},
        "points": [{"family": p.family, "knobs": p.knobs, "default": p.default, "on_frontier": p.on_frontier,
                    **_point_doc(trace, p.run, p.score)} for p in frontier.points],
        "verdict": {"passed": v.passed, "on_or_above_baselines": v.on_or_above,
                    "zero_material_false_kills": v.zero_material_false_kills,
                    "default_gpu_hours": v.default.score.reclaimed_gpu_hours,
                    "best_baseline": None if v.best_baseline is None else {
                        "family": v.best_baseline.family, "knobs": v.best_baseline.knobs,
                        "gpu_hours": v.best_baseline.score.reclaimed_gpu_hours,
                        "material_false_kills": v.best_baseline.score.material_false_kills}},
        "agent_wall_s": round(frontier.agent_wall_s, 2), "wall_s": round(wall, 2),
    }


def _knob(text: str) -> dict[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--agent-knob {text!r}: write KEY=VALUE, e.g. detectors.idle.window=2h")
    return {key.strip(): yaml.safe_load(value)}


def cmd_replay(args: argparse.Namespace, settings: Any) -> int:
    started = time.perf_counter()
    for flag, given in (("--svg", args.svg), ("--agent-knob", args.agent_knob)):
        if given and not args.frontier:
            print(f"error: {flag} belongs to the frontier; use it with --frontier", file=sys.stderr)
            return 2
    if args.jobs < 1:
        print(f"error: --jobs must be at least 1 (got {args.jobs})", file=sys.stderr)
        return 2
    try:
        trace = load_trace(args.trace, id_col=args.id_col, time_col=args.time_col, util_col=args.util_col,
                           mem_col=args.mem_col).stretched(args.time_scale).repeated(args.repeat, args.act_after)
        policy = load_policy(args.policy)
    except (TraceError, PolicyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.frontier:
        try:
            knobs = AGENT_KNOBS if args.agent_knob is None else ({}, *(_knob(k) for k in args.agent_knob))
            frontier = run_frontier(trace, policy, every=args.every, jobs=args.jobs, agent_knobs=knobs)
        except ValueError as exc:  # a bad agent knob (PolicyError is one): named before any replay runs
            print(f"error: {exc}", file=sys.stderr)
            return 2
        from evals.replay_html import write_frontier_html, write_frontier_svg

        if args.html:
            write_frontier_html(args.html, trace, frontier)
        if args.svg:
            write_frontier_svg(args.svg, frontier)
        if args.json:
            print(json.dumps(_frontier_doc(trace, frontier, time.perf_counter() - started), indent=2))
        else:
            print_frontier(trace, frontier, args.jobs)
            for label, path in (("HTML report", args.html), ("SVG plot", args.svg)):
                if path:
                    print(f"{label}: {path}")
        return 0
    name = f"agent ({args.policy.name})" if args.policy else "agent (default policy)"
    best, strict, scores, runs = replay(trace, policy, name, args.every)
    wall = time.perf_counter() - started
    if args.html:
        from evals.replay_html import write_html

        write_html(args.html, trace, best, strict, scores, runs)
    if args.json:
        print(json.dumps({"trace": trace.path, "containers": len(trace.containers), "columns": trace.columns,
                          "material_work_gpu_s": MATERIAL_WORK_GPU_S, "strict_util_above_pct": ACTIVE_PCT,
                          "oracle": {"material": {**best.model_dump(), "total": best.total},
                                     "strict": {**strict.model_dump(), "total": strict.total}},
                          "policies": [_point_doc(trace, r, s) for r, s in zip(runs, scores, strict=True)],
                          "wall_s": round(wall, 2)}, indent=2))
    else:
        print_table(trace, best, strict, scores, wall)
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
    p.add_argument("--time-scale", type=float, default=1.0, metavar="F",
                   help="replay the trace at another tempo: every time, pause and interval times F (robustness: "
                        "the same users pausing F times as long; default 1)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="replay the trace N times in a row (after --time-scale): is a container stopped in one "
                        "lull back at work after it? (default 1)")
    p.add_argument("--act-after", type=_duration, default=0.0, metavar="DURATION",
                   help="no policy stops anything before this (e.g. 34h with --repeat 3: the first night and "
                        "morning are history to learn from); warnings still go out")
    p.add_argument("--json", action="store_true", help="print JSON, with every stop and warning of every policy")
    p.add_argument("--html", type=Path, help="also write a self-contained HTML report here")
    p.add_argument("--frontier", action="store_true",
                   help="each baseline family across its knob and the agent across its main knobs: reclaimed "
                        "GPU-hours against material false kills, and whether the agent's default beats them")
    p.add_argument("--agent-knob", action="append", metavar="KEY=VALUE",
                   help="with --frontier: one agent point besides the default, a dotted policy key and its value "
                        "(repeatable; replaces the built-in set: idle window, long-tail share, blips and lookback, notice)")
    p.add_argument("--svg", type=Path, help="with --frontier: also write the frontier plot alone as an SVG file")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="with --frontier: processes for the agent's points (default: the CPU count)")
    p.set_defaults(handler=cmd_replay)
