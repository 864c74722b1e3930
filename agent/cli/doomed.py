"""`steward doomed backtest TRACE [--train EARLIER] [--json]`: the doomed-job rules against the plain rule."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from evals.doomed_backtest import (
    SCORED_SHARE,
    after,
    backtest,
    by_slice,
    by_user_bootstrap,
    load_jobs,
    print_spread,
    print_table,
    split,
    to_json,
)
from evals.series import SeriesError


def cmd_doomed_backtest(args: argparse.Namespace, settings: Any) -> int:
    try:
        jobs = load_jobs(args.trace)
        if args.train:
            history = load_jobs(args.train)
            scored = after(history, jobs)
            note = f"all of it; history from {args.train} first"
            slices = by_slice(scored, history, delay_s=args.delay)
            scored_from = 0.0
        else:
            history, scored = split(jobs)
            note = f"the last {len(scored)} of {len(jobs)} submissions; the earlier ones are history only"
            slices = by_slice(jobs, [], delay_s=args.delay)
            scored_from = 1.0 - SCORED_SHARE
        result = backtest(scored, history, delay_s=args.delay)
        boot = by_user_bootstrap(result)
    except (SeriesError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(to_json(result, boot, slices), indent=2))
    else:
        print_table(result, str(args.trace), note)
        print_spread(result, boot, slices, scored_from)
    return 0


def register_cli(subparsers: Any) -> None:
    from agent.cli.main import _duration

    p = subparsers.add_parser("doomed", help="jobs doomed to fail: flag repeat crash loops from finished history")
    sub = p.add_subparsers(dest="doomed_command", required=True)
    bt = sub.add_parser("backtest", help="precision, recall and GPU-hours saved on a finished-job trace")
    bt.add_argument("trace", type=Path, help="CSV (or .csv.gz): user, submit_time, gpus, state, duration_s "
                                             "[, cpus, nodes, reason]")
    bt.add_argument("--train", type=Path, help="an earlier trace of the same cluster: history comes from it, and "
                                               "all of TRACE is scored")
    bt.add_argument("--delay", type=_duration, default=0.0,
                    help="count an outcome as known this long after submit + duration (the trace has no queue "
                         "time; default 0)")
    bt.add_argument("--json", action="store_true")
    bt.set_defaults(handler=cmd_doomed_backtest)
