"""The `steward` command line: sweep, eval, policy check (and the subcommands other modules add)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agent.cli.errors import ConfigurationError
from agent.cli.sweep import cmd_sweep
from agent.config.policy import PolicyError, load_policy
from agent.config.settings import Settings
from core.durations import parse_duration
from sim.scenario import ScenarioError, load_scenario

Handler = Callable[[argparse.Namespace, Settings], int]
LANGUAGES = ("en", "zh")
BACKENDS = ("sim", "kubernetes", "slurm")


def configuration_problems(settings: Settings, *, backend_used: bool) -> list[str]:
    """What is wrong with the settings, before anything is read or built; `backend_used`: it talks to the cluster."""
    problems = []
    if settings.language not in LANGUAGES:
        problems.append(f"STEWARD_LANGUAGE={settings.language!r} is not a language GPU Steward speaks: set it to "
                        "en (English) or zh (中文).")
    if not backend_used:
        return problems
    from croniter import croniter

    for name, cron, example in (("STEWARD_SWEEP_CRON", settings.sweep_cron, "*/5 * * * *"),
                                ("STEWARD_DIGEST_CRON", settings.digest_cron, "0 9 * * 1")):
        if cron and not croniter.is_valid(cron):
            problems.append(f"{name}={cron!r} is not a cron expression: five fields in cluster time (UTC), "
                            f"e.g. {example!r}.")
    if settings.backend not in BACKENDS:
        problems.append(f"STEWARD_BACKEND={settings.backend!r} is not a backend: use sim (the built-in demo), "
                        "kubernetes or slurm.")
    elif settings.backend != "sim":
        if not settings.prometheus_url:
            problems.append(f"STEWARD_BACKEND={settings.backend} reads GPU utilisation from Prometheus (dcgm-exporter "
                            "series), but STEWARD_PROMETHEUS_URL is not set: point it at Prometheus, Thanos Query or "
                            "VictoriaMetrics, e.g. STEWARD_PROMETHEUS_URL=http://prometheus:9090 "
                            "(docs/real-cluster-prometheus.md).")
        if settings.backend == "kubernetes" and not _kubernetes_config_found(settings):
            where = (f"STEWARD_KUBECONFIG={settings.kubeconfig} does not exist" if settings.kubeconfig is not None
                     else "there is no kubeconfig (STEWARD_KUBECONFIG, $KUBECONFIG or ~/.kube/config) and this is "
                          "not a pod with a service account")
            problems.append(f"STEWARD_BACKEND=kubernetes needs access to the cluster, but {where}: set "
                            "STEWARD_KUBECONFIG to a kubeconfig file, or run the steward in the cluster "
                            "(docs/real-cluster-kubernetes.md).")
    if settings.pool_provider not in ("none", "capi", "aws"):
        problems.append(f"STEWARD_POOL_PROVIDER={settings.pool_provider!r}: use none, capi or aws.")
    return problems


def _kubernetes_config_found(settings: Settings) -> bool:
    if settings.kubeconfig is not None:
        return settings.kubeconfig.is_file()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):  # in a pod: the service account is tried first
        return True
    files = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    return any(Path(f).is_file() for f in files.split(os.pathsep) if f)


def _duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def back_from(at: datetime, seconds: float) -> datetime | None:
    """`at` less `seconds`; None when that lies before the calendar's first day (`--since 99999999d`: everything)."""
    try:
        return at - timedelta(seconds=seconds)
    except (OverflowError, ValueError):  # past timedelta's range, or past year 1
        return None


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
        try:
            planner = make_planner(settings, model)
        except ValueError as exc:  # a model named with no endpoint to ask
            raise ConfigurationError(str(exc)) from None
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
    return 0 if meets_answer_key(documents) else 1


def meets_answer_key(documents: dict[str, list[dict[str, Any]]]) -> bool:
    """Every scenario passes, except the known misses (evals/suite.py), which must still miss (strict)."""
    from evals.suite import KNOWN_MISSES

    ok = True
    for model, docs in documents.items():
        for doc in docs:
            known = doc["name"] in KNOWN_MISSES
            if known and doc["passed"]:
                print(f"{model}: {doc['name']} passes but is listed as a known miss: remove it from "
                      "evals/suite.py KNOWN_MISSES", file=sys.stderr)
                ok = False
            elif known:
                print(f"{model}: {doc['name']}: expected miss ({KNOWN_MISSES[doc['name']]})", file=sys.stderr)
            elif not doc["passed"]:
                ok = False
    return ok


def cmd_policy_check(args: argparse.Namespace, settings: Settings) -> int:
    zh = (args.lang or settings.language) == "zh"
    try:
        policy = load_policy(args.file)
    except PolicyError as exc:
        if not zh:
            raise
        print(f"错误：策略文件无效（以下为校验器的原文，字段名即策略中的键）：{exc}", file=sys.stderr)
        return 2
    f, lv = args.file, policy.levels
    print(f"{f}：校验通过（模式 {policy.mode}；自动执行最高级别 {lv.max_auto}，上限 {lv.max}；需要审批的级别 "
          f"{lv.require_approval}）" if zh else f"{f}: ok (mode {policy.mode}; max automatic level {lv.max_auto}, "
          f"ceiling {lv.max}; approval for levels {lv.require_approval})")
    added, removed = policy.protection.added(), policy.protection.removed()
    listed = "、".join(added) if zh else ", ".join(added)
    print(f"{f}：新增保护：{listed or '无'}" if zh else f"{f}: protection added: {listed or 'none'}")
    # Giving up a built-in protection is allowed, but never silently.
    if removed:
        print(f"{f}：警告：移除了内置保护：{'、'.join(removed)}" if zh else
              f"{f}: WARNING: built-in protection removed: {', '.join(removed)}")
    else:
        print(f"{f}：内置保护全部保留" if zh else f"{f}: built-in protection kept: all")
    n = policy.notifications
    if n.outside_hours == "defer":
        days = ("仅工作日" if n.weekdays_only else "每天") if zh else ("weekdays" if n.weekdays_only else "every day")
        print(f"{f}：注意：给所有者的警告（因而所有停止）都要等到工作时间（{n.working_hours} {n.timezone}，{days}）："
              "夜间或周末闲置的作业要到那时才会回收" if zh else
              f"{f}: NOTE: owner warnings, and so every stop, wait for working hours ({n.working_hours} "
              f"{n.timezone}, {days}): jobs left idle overnight or over a weekend are not reclaimed until then")
    return 0


def cmd_policy_example(args: argparse.Namespace, settings: Settings) -> int:
    from agent.assets import EXAMPLE_POLICY

    sys.stdout.write(EXAMPLE_POLICY.read_text(encoding="utf-8"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="steward", description="GPU Steward: find and reclaim wasted GPUs.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    sweep = sub.add_parser("sweep", help="sweep a cluster (default: the built-in demo, replayed to its end)")
    sweep.add_argument("--scenario", type=Path, help="scenario file to simulate (default: built-in demo)")
    sweep.add_argument("--policy", type=Path, help="policy file (default: built-in defaults)")
    sweep.add_argument("--at", type=_duration, help="scenario time of the last sweep, e.g. 3h (default: its end)")
    sweep.add_argument("--every", type=_duration, help="sweep interval (default: STEWARD_SWEEP_EVERY_S, 5m)")
    sweep.add_argument("--once", action="store_true", help="one sweep at --at, with no earlier sweeps")
    sweep.add_argument("--lang", choices=["en", "zh"], help="language of the report and notifications")
    sweep.add_argument("--json", action="store_true", help="print the final state and timeline as JSON")
    sweep.set_defaults(handler=cmd_sweep)

    ev = sub.add_parser("eval", help="run scenarios to the end and score them")
    ev.add_argument("scenarios", nargs="+", help="scenario files or folders")
    ev.add_argument("--policy", type=Path, help="one policy for every scenario (default: each one's sidecar "
                                                "policy in evals/policies/, else the defaults)")
    ev.add_argument("--every", type=_duration, help="sweep interval (default: STEWARD_SWEEP_EVERY_S, 5m)")
    ev.add_argument("--model", action="append", help="plan with this model on the configured endpoint (repeatable)")
    ev.add_argument("--json", action="store_true", help="print the scored runs as JSON")
    ev.set_defaults(handler=cmd_eval)

    policy = sub.add_parser("policy", help="policy files")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    check = policy_sub.add_parser("check", help="validate a policy file")
    check.add_argument("file", type=Path)
    check.add_argument("--lang", choices=["en", "zh"], help="language of the report (default: STEWARD_LANGUAGE)")
    check.set_defaults(handler=cmd_policy_check)
    example = policy_sub.add_parser("example", help="print the example policy (every key, with its default)")
    example.set_defaults(handler=cmd_policy_example)

    for register in _extensions():
        register(sub)
    return parser


def _extensions() -> list[Callable[[Any], None]]:
    """Subcommands that live with their feature (serve, replay, runbooks, sim exporter)."""
    found = []
    for module_name in ("server", "evals.replay_cli", "agent.cli.approvals", "agent.cli.runbooks", "agent.cli.llm",
                        "agent.cli.audit", "agent.cli.changes",
                        "agent.cli.doomed", "agent.cli.forecast", "agent.cli.report", "sim.cli"):
        try:
            module = __import__(module_name, fromlist=["register_cli"])
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        if hasattr(module, "register_cli"):
            found.append(module.register_cli)
    return found


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpu-steward")
    except PackageNotFoundError:
        return "unknown (not installed)"


def environment_errors(exc: ValueError) -> list[str]:
    """One line per STEWARD_* variable that does not parse, named as it is set (not pydantic's field name)."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        named = re.search(r'error parsing value for field "(\w+)"', str(exc))
        if named:  # pydantic-settings could not decode a complex value (a list, a dict) as JSON
            return [f"STEWARD_{named.group(1).upper()}: not valid JSON (this variable takes a JSON value)"]
        return [f"the STEWARD_* environment does not parse: {exc}"]
    out = []
    for e in errors():
        field = ".".join(str(x) for x in e.get("loc", ())) or "?"
        msg = str(e.get("msg", "")).removeprefix("Value error, ")
        if e.get("type") == "json_invalid" or "error parsing value" in msg:
            msg = "not valid JSON (this variable takes a JSON value)"
        out.append(f"STEWARD_{field.upper()}: {msg}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = Settings()
    except ValueError as exc:  # pydantic's ValidationError: a STEWARD_* variable of the wrong type
        print("error: " + "\n".join(environment_errors(exc)), file=sys.stderr)
        return 2
    if settings.runbooks_enabled is None:  # the commands people run ground their answers in runbooks
        settings = settings.model_copy(update={"runbooks_enabled": True})
    backend_used = args.command == "serve" or (args.command == "sweep" and getattr(args, "scenario", None) is None)
    problems = configuration_problems(settings, backend_used=backend_used)
    if problems:
        print("error: " + "\n".join(problems), file=sys.stderr)
        return 2
    try:
        return int(args.handler(args, settings))
    except (ScenarioError, PolicyError, ConfigurationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if type(exc).__name__ == "ConfigException":  # the kubernetes client's: no usable cluster configuration
            print(f"error: cannot reach the Kubernetes cluster: {exc} Set STEWARD_KUBECONFIG to a kubeconfig file, or "
                  "run the steward in the cluster (docs/real-cluster-kubernetes.md).", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
