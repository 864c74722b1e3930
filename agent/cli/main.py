"""The `steward` command line: sweep, eval, policy check (and the subcommands other modules add)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.cli.sweep import cmd_sweep
from agent.config.policy import PolicyError, load_policy
from agent.config.settings import Settings
from core.durations import parse_duration
from sim.scenario import ScenarioError, load_scenario

Handler = Callable[[argparse.Namespace, Settings], int]


def _duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _scenario_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    return files


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    from agent.wiring import make_planner
    from evals.runner import run_scenario
    from evals.suite import policy_for

    explicit = args.policy or settings.policy_file
    policy = load_policy(explicit)
    files = _scenario_files(args.scenarios)
    scenarios = [load_scenario(f) for f in files]
    # Without an explicit policy, a scenario runs under its sidecar policy (evals/scenarios/README.md).
    policies = [policy if explicit else policy_for(f) for f in files]
    models: list[str | None] = list(args.model) if args.model else [None]
    documents: dict[str, list[dict[str, Any]]] = {}
    for model in models:
        planner = make_planner(settings, model)
        runs = [run_scenario(s, p, planner, sweep_every=args.every or settings.sweep_every_s)
                for s, p in zip(scenarios, policies, strict=True)]
        documents[planner.name] = [r.document() for r in runs]
    if args.json:
        if len(documents) == 1:
            print(json.dumps({"scenarios": next(iter(documents.values()))}, ensure_ascii=False, indent=2))
        else:
            print(json.dumps({"models": {m: {"scenarios": d} for m, d in documents.items()}}, ensure_ascii=False,
                             indent=2))
    else:
        from evals.table import print_eval_tables

        print_eval_tables(documents)
    failed = any(not doc["passed"] for docs in documents.values() for doc in docs)
    return 1 if failed else 0


def cmd_policy_check(args: argparse.Namespace, settings: Settings) -> int:
    policy = load_policy(args.file)
    print(f"{args.file}: ok (mode {policy.mode}; max automatic level {policy.levels.max_auto}, "
          f"ceiling {policy.levels.max}; approval for levels {policy.levels.require_approval})")
    added, removed = policy.protection.added(), policy.protection.removed()
    print(f"{args.file}: protection added: {', '.join(added) if added else 'none'}")
    # Giving up a built-in protection is allowed, but never silently.
    if removed:
        print(f"{args.file}: WARNING: built-in protection removed: {', '.join(removed)}")
    else:
        print(f"{args.file}: built-in protection kept: all")
    return 0


def cmd_policy_example(args: argparse.Namespace, settings: Settings) -> int:
    from agent.assets import EXAMPLE_POLICY

    sys.stdout.write(EXAMPLE_POLICY.read_text(encoding="utf-8"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="steward", description="GPU Steward: find and reclaim wasted GPUs.")
    sub = parser.add_subparsers(dest="command", required=True)

    sweep = sub.add_parser("sweep", help="sweep a cluster (default: the built-in demo, replayed to its end)")
    sweep.add_argument("--scenario", type=Path, help="scenario file to simulate (default: built-in demo)")
    sweep.add_argument("--policy", type=Path, help="policy file (default: built-in defaults)")
    sweep.add_argument("--at", type=_duration, help="scenario time of the last sweep (default: its end)")
    sweep.add_argument("--every", type=_duration, help="sweep interval (default: STEWARD_SWEEP_EVERY_S, 5m)")
    sweep.add_argument("--once", action="store_true", help="one sweep at --at, with no earlier sweeps")
    sweep.add_argument("--lang", choices=["en", "zh"], help="language of the report and notifications")
    sweep.add_argument("--json", action="store_true")
    sweep.set_defaults(handler=cmd_sweep)

    ev = sub.add_parser("eval", help="run scenarios to the end and score them")
    ev.add_argument("scenarios", nargs="+", help="scenario files or folders")
    ev.add_argument("--policy", type=Path)
    ev.add_argument("--every", type=_duration)
    ev.add_argument("--model", action="append", help="plan with this model on the configured endpoint (repeatable)")
    ev.add_argument("--json", action="store_true")
    ev.set_defaults(handler=cmd_eval)

    policy = sub.add_parser("policy", help="policy files")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    check = policy_sub.add_parser("check", help="validate a policy file")
    check.add_argument("file", type=Path)
    check.set_defaults(handler=cmd_policy_check)
    example = policy_sub.add_parser("example", help="print the example policy (every key, with its default)")
    example.set_defaults(handler=cmd_policy_example)

    for register in _extensions():
        register(sub)
    return parser


def _extensions() -> list[Callable[[Any], None]]:
    """Subcommands that live with their feature (serve, replay, runbooks, sim exporter)."""
    found = []
    for module_name in ("server", "evals.replay_cli", "agent.cli.runbooks", "sim.cli"):
        try:
            module = __import__(module_name, fromlist=["register_cli"])
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        if hasattr(module, "register_cli"):
            found.append(module.register_cli)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = Settings()
    if settings.runbooks_enabled is None:  # the commands people run ground their answers in runbooks
        settings = settings.model_copy(update={"runbooks_enabled": True})
    try:
        return int(args.handler(args, settings))
    except (ScenarioError, PolicyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
