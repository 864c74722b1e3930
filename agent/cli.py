"""The `steward` command line: sweep, eval, policy check (and the subcommands other modules add)."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from agent.policy import PolicyError, load_policy
from agent.settings import Settings
from sim.durations import parse_duration
from sim.scenario import ScenarioError, demo_scenario_path, load_scenario

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


def cmd_sweep_cluster(args: argparse.Namespace, settings: Settings) -> int:
    """One sweep of the real cluster that STEWARD_BACKEND names."""
    from agent.sweep import SweepService
    from agent.wiring import cluster_deps, make_planner

    policy = load_policy(args.policy or settings.policy_file)
    deps = cluster_deps(settings, policy, make_planner(settings))
    from agent.runbook_index import runbooks_from_settings

    runbooks_from_settings(deps, settings)
    saver = SqliteSaver(sqlite3.connect(str(settings.checkpoint_db), check_same_thread=False))
    result = SweepService(deps, checkpointer=saver, run_prefix=settings.backend).sweep(trigger="cli")
    if args.json:
        print(json.dumps(result.state, default=str, ensure_ascii=False, indent=2))
    else:
        print(result.report)
        print(f"\nAudit log: {deps.audit.path}")
    return 0


def cmd_sweep(args: argparse.Namespace, settings: Settings) -> int:
    from agent.sweep import SweepService
    from agent.wiring import make_planner, simulated_deps
    from evals.runner import ScriptedApprovals

    if settings.backend != "sim" and args.scenario is None:
        return cmd_sweep_cluster(args, settings)

    scenario = load_scenario(args.scenario or settings.scenario or demo_scenario_path())
    policy = load_policy(args.policy or settings.policy_file)
    run_dir = settings.ensure_data_dir() / "runs" / f"{scenario.name}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    deps, cluster = simulated_deps(scenario, policy, make_planner(settings), data_dir=run_dir,
                                   language=args.lang or settings.language)
    from agent.runbook_index import runbooks_from_settings

    runbooks_from_settings(deps, settings)
    saver = SqliteSaver(sqlite3.connect(str(run_dir / "checkpoints.sqlite"), check_same_thread=False))
    service = SweepService(deps, checkpointer=saver, run_prefix=scenario.name)
    until = min(args.at if args.at is not None else scenario.duration, scenario.duration)
    every = args.every or settings.sweep_every_s
    times = [until] if args.once else [t * every for t in range(1, int(until // every) + 1)] or [until]
    if times[-1] < until:
        times.append(until)
    timeline: list[str] = []
    result = None
    scripted = ScriptedApprovals(scenario, service)  # the scenario's scripted human answers
    for t in times:
        cluster.advance_to(t)
        service.expire_due()
        for answered in scripted.answer_due(t):
            a = answered.state.get("approval", {})
            for o in answered.state.get("outcomes", []):
                timeline.append(f"  {cluster.now():%H:%M}  {o['action']:<16} {o['target']:<34} level {o['level']}  "
                                f"{a.get('decision')}d by {a.get('by')}: {o['status']}")
        result = service.sweep(trigger="cli")
        for d in result.state.get("decisions", []):
            outs = {o["id"]: o for o in result.state.get("outcomes", [])}
            status = outs.get(d["id"], {}).get("status") or {"deny": "refused", "needs_approval": "awaiting approval",
                                                             "allow": "allowed"}[d["decision"]["verdict"]]
            timeline.append(f"  {cluster.now():%H:%M}  {d['proposal']['action']:<16} {d['proposal']['target']:<34} "
                            f"level {d['decision']['level']}  {status}")
    assert result is not None
    if args.json:
        print(json.dumps({"scenario": scenario.name, "run_dir": str(run_dir), "state": result.state,
                          "timeline": timeline, "pending_approvals": [a.model_dump(mode="json")
                                                                       for a in deps.approvals.pending()]},
                         default=str, ensure_ascii=False, indent=2))
        return 0
    print(f"GPU Steward on simulated cluster '{scenario.name}' ({scenario.description.strip().splitlines()[0] if scenario.description else ''})")
    print(f"Sweeping every {int(every // 60)}m from {scenario.start:%H:%M} to {cluster.now():%H:%M} UTC "
          f"({len(times)} sweeps; planner: {deps.planner.name}).\n")
    if timeline and not args.once:
        print("What the agent did along the way:")
        print("\n".join(timeline))
        print()
    print(result.report)
    pending = deps.approvals.pending()
    if pending:
        print("\nWaiting for a human:")
        for a in pending:
            print(f"  {a.id}  {a.action} {a.target} (level {a.level}), expires {a.expires_at:%H:%M} UTC")
    print(run_summary(deps))
    print(f"\nAudit log: {deps.audit.path}  ({deps.audit.count()} entries)")
    return 0


def run_summary(deps: Any) -> str:
    """What the whole run found, did and saved, and one warning as its owner received it."""
    from agent.api.savings import compute_savings
    from agent.cost import money

    found = {(e.target, e.status) for e in deps.audit.entries(kind="finding", limit=1_000_000)}
    done = [e for e in deps.audit.entries(kind="execution", status="executed", limit=100_000)]
    count = {a: sum(1 for e in done if e.action == a) for a in ("notify", "terminate", "force_terminate",
                                                                "resize_pool")}
    savings = compute_savings(deps.audit, [], deps.clock.now(), deps.currency)
    lines = [
        "",
        f"Over the run: {len(found)} findings on {len({t for t, _ in found})} targets; {count['notify']} warnings, "
        f"{count['terminate']} graceful stops, {count['force_terminate']} forced stops, "
        f"{count['resize_pool']} pool resizes executed.",
        f"Reclaimed so far: {savings.reclaimed_gpu_hours:.1f} GPU-hours ({money(savings.reclaimed_money, deps.currency)}).",
    ]
    sent = getattr(deps.notifier, "sent", [])
    warning = next((m for m in sent if "SIGTERM" in m.body), sent[0] if sent else None)
    if warning is not None:
        lines += ["", f"A warning as {warning.recipient} received it at {warning.at:%H:%M}:"]
        lines += [f"  | {line}" for line in warning.body.splitlines()]
    return "\n".join(lines)


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

    for register in _extensions():
        register(sub)
    return parser


def _extensions() -> list[Callable[[Any], None]]:
    """Subcommands that live with their feature (serve, replay, runbooks, sim exporter)."""
    found = []
    for module_name in ("server", "evals.replay_cli", "agent.runbooks_cli", "sim.cli"):
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
