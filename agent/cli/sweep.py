"""`steward sweep`: replay a simulated cluster (the demo by default) or sweep the real one, and report."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from datetime import UTC, datetime, tzinfo
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from agent.cli.errors import ConfigurationError
from agent.config.policy import load_policy
from agent.config.settings import Settings
from agent.detectors.evidence import kind_label
from agent.graph.deps import StewardDeps
from agent.graph.report import action_label, pad, report_for_people, status_label
from agent.scheduling.scheduler import SweepSchedule, SweepScheduler
from core.durations import format_duration
from core.text import one_line, plural
from core.zones import zone_suffix
from sim.scenario import demo_scenario_path, load_scenario

WORDS = {
    "en": {
        "header": "GPU Steward on simulated cluster '{name}' ({about})",
        "sweeping": "Sweeping every {every}m from {start} to {end}{zone} ({sweeps}; planner: {planner}).",
        "timeline": "What the agent did along the way (time, action, target, why, level, result):",
        "level": "level",
        "answered": "{decision}d by {by}",
        "refused": "refused", "awaiting": "awaiting approval", "allowed": "allowed",
        "waiting": "Waiting for a human:",
        "waiting_replay": "(This replay ended with these open; they live in {run_dir}. On a live steward answer them "
                          "with `steward approvals approve|deny ID`, or in the web UI.)",
        "expires": "expires",
        "over_run": "Over the run: {findings} on {targets}; {notify}, {terminate}, {force}, {resize} executed.",
        "index": "Building the runbook index once (20-60 s; later runs reuse it)",
        "progress": "Sweeping",
        "reclaimed": "Reclaimed so far: {hours:.1f} GPU-hours ({money}).",
        "warning_as": "A warning as {who} received it at {at}:",
        "audit": "Audit log: {path}  ({count} entries)",
    },
    "zh": {
        "header": "GPU Steward 模拟集群 '{name}'（{about}）",
        "sweeping": "从 {start} 到 {end}{zone}，每 {every} 分钟巡检一次（共 {n} 次；规划器：{planner}）。",
        "timeline": "巡检过程中的操作（时间、操作、目标、原因、级别、结果）：",
        "level": "级别",
        "answered": "{by} 已{decision_zh}",
        "refused": "被护栏拒绝", "awaiting": "等待审批", "allowed": "已允许",
        "waiting": "等待人工审批：",
        "waiting_replay": "（本次回放结束时这些审批仍未处理，数据在 {run_dir}。在线运行的巡检服务可用 "
                          "`steward approvals approve|deny ID` 或网页界面处理。）",
        "expires": "过期时间",
        "index": "首次构建运行手册索引（20-60 秒，之后复用）",
        "progress": "巡检中",
        "over_run": "本次运行：{targets} 个目标上 {findings} 项发现；已执行 {notify} 次警告、{terminate} 次优雅停止、"
                    "{force} 次强制停止、{resize} 次节点池缩容。",
        "reclaimed": "累计回收：{hours:.1f} GPU 小时（{money}）。",
        "warning_as": "{who} 于 {at} 收到的警告：",
        "audit": "审计日志：{path}（{count} 条）",
    },
}


def _words(language: str) -> dict[str, str]:
    return WORDS.get(language, WORDS["en"])


def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _why(kind: str | None, language: str) -> str:
    """The timeline's reason column: the finding kind behind an action (idle, zombie, ...)."""
    return kind_label(kind, language) if kind else "-"


def _answered_lines(answered: list[Any], language: str) -> list[str]:
    """What this sweep carried out on answers given since the last one, before its own report."""
    zh = language == "zh"
    lines = []
    for done in answered:
        a = done.state.get("approval", {})
        for o in done.state.get("outcomes", []):
            by, target = one_line(str(a.get("by") or "?")), one_line(o["target"])
            decision = ("批准" if a.get("decision") == "approve" else "拒绝") if zh else a.get("decision", "?")
            lines.append(f"已按审批执行（{decision}，{by}）：{action_label(o['action'], language)} {target} "
                         f"{status_label(o['status'], language)}" if zh else
                         f"answered ({decision} by {by}): {o['action']} {target} {o['status']}")
    return lines + ([""] if lines else [])


DEGRADED_EXIT = 3  # `steward sweep` on a real cluster: the sweep ran, but on data it could not read whole
ACTION_FAILED_EXIT = 4  # it read the cluster, and an action it carried out failed (a stop, a warning not delivered)
BUSY_EXIT = 75  # EX_TEMPFAIL: another steward (the server, another cron sweep) holds the sweeper lease; nothing ran
LEASE_EXIT = 78  # EX_CONFIG: the sweeper lease cannot be taken at all (no rights, not in a pod, a read-only store)


def sweep_exit(state: dict) -> int:
    """A real-cluster sweep's exit status for cron and monitoring: 3 degraded (part of the cluster not read; it says
    more than a failed action, which it may explain), 4 an action failed, 0 clean."""
    if state.get("observed", {}).get("degraded"):
        return DEGRADED_EXIT
    if any(o.get("status") == "failed" for o in state.get("outcomes", [])):
        return ACTION_FAILED_EXIT
    return 0


def _lapsed_then_taken(lease: Any, settings: Settings) -> bool:
    """The Kubernetes Lease is taken only once its record has stood unrenewed for a lease duration as this process
    saw it (agent/scheduling/k8s_lease.py), and a one-shot run has just seen it for the first time: it waits that
    long, once, and asks again. Else the Lease of a steward that stopped without giving it back (a killed pod, a
    server between two sweeps) would never be taken by a cron sweep. A holder that renews meanwhile keeps it."""
    import time

    if not hasattr(lease, "lapses_in_s"):
        return False
    holder = lease.current_holder()  # read again: a record changed meanwhile is waited for from now
    if holder is None:  # given back or lapsed meanwhile
        return bool(lease.acquire())
    wait = lease.lapses_in_s()
    if wait is None or wait > max(60.0, 2 * settings.lease_duration_s):
        return False
    print(f"the sweeper lease {settings.lease_name!r} is held by {holder}; waiting {wait:.0f}s to see whether it is "
          "renewed", file=sys.stderr)
    time.sleep(wait + 0.5)
    return bool(lease.acquire())


def cmd_sweep_cluster(args: argparse.Namespace, settings: Settings) -> int:
    """One sweep of the real cluster that STEWARD_BACKEND names."""
    from agent.api.build import make_lease
    from agent.graph.service import SweepService
    from agent.retrieval.index import runbooks_from_settings
    from agent.wiring import cluster_deps, make_planner

    policy = load_policy(args.policy or settings.policy_file)
    deps = cluster_deps(settings, policy, make_planner(settings))
    runbooks_from_settings(deps, settings)
    saver = SqliteSaver(sqlite3.connect(str(settings.checkpoint_db), check_same_thread=False))
    service = SweepService(deps, checkpointer=saver, run_prefix=settings.backend)
    # The server's sweeper lease: a cron sweep beside `steward serve` on one data dir (or one Postgres, or in the
    # cluster's Lease) never runs while the server sweeps, so no job is warned or stopped twice by the two.
    try:
        lease = make_lease(settings)
        taken = lease.acquire() or _lapsed_then_taken(lease, settings)
    except Exception as exc:  # no rights on the Lease, STEWARD_LEADER_LOCK=kubernetes outside a pod, a store down
        # A lock held past the timeout, an API server's 5xx or a timeout pass: the next run may sweep (75). The rest
        # (no rights, not in a pod) is configuration (78), said as such.
        passing = (isinstance(exc, TimeoutError | ConnectionError) or "locked" in str(exc).lower()
                   or (getattr(exc, "status", None) or 0) >= 500)
        print(f"not swept: the sweeper lease {settings.lease_name!r} (STEWARD_LEADER_LOCK={settings.leader_lock}) "
              f"cannot be taken{' now' if passing else ''}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return BUSY_EXIT if passing else LEASE_EXIT
    problem = getattr(lease, "problem", None)
    if problem is not None:
        print(f"not swept: the sweeper lease cannot be taken: {problem.detail}", file=sys.stderr)
        return LEASE_EXIT
    if not taken:
        holder = getattr(lease, "current_holder", lambda: None)()
        print(f"not swept: another steward holds the sweeper lease {settings.lease_name!r}"
              + (f" ({holder})" if holder else "") + "; it sweeps this cluster, so this run did nothing", file=sys.stderr)
        return BUSY_EXIT
    guard = SweepScheduler(lambda trigger: service.sweep(trigger=trigger), deps.clock.now, SweepSchedule(every_s=1),
                           lease)
    try:
        ran, result = guard.run_as_leader("cli")
    finally:
        lease.release()
    if ran != "ran":  # lost between taking it and sweeping: another steward sweeps
        print(f"not swept: the sweeper lease {settings.lease_name!r} was taken by another steward", file=sys.stderr)
        return BUSY_EXIT
    if args.json:
        print(json.dumps(result.state, default=str, ensure_ascii=False, indent=2))
    else:
        for line in _answered_lines(result.answered, deps.language):  # e.g. a forced stop approved from the shell
            print(line)
        print(report_for_people(result.report, result.state, deps, settings.zone()))
        print("\n" + _words(deps.language)["audit"].format(path=deps.audit.path, count=deps.audit.count()))
    # Cron and monitoring tell a sweep that could not read (part of) the cluster, or whose action failed, by its status.
    return sweep_exit(result.state)


def cmd_sweep(args: argparse.Namespace, settings: Settings) -> int:
    from agent.graph.service import SweepService
    from agent.retrieval.index import runbooks_from_settings
    from agent.wiring import make_planner, simulated_deps
    from evals.runner import ScriptedApprovals

    if settings.backend != "sim" and args.scenario is None:
        return cmd_sweep_cluster(args, settings)
    language = args.lang or settings.language
    w = _words(language)
    scenario = load_scenario(args.scenario or settings.scenario or demo_scenario_path())
    if args.at is not None and args.at > scenario.duration:
        end = scenario.start.timestamp() + scenario.duration
        raise ConfigurationError(
            f"--at {format_duration(args.at)} is past the end of scenario '{scenario.name}', which lasts "
            f"{format_duration(scenario.duration)} ({scenario.start:%H:%M} to "
            f"{datetime.fromtimestamp(end, UTC):%H:%M} UTC): use --at {format_duration(scenario.duration)} or less, "
            "or leave --at out to sweep to its end.")
    policy = load_policy(args.policy or settings.policy_file)
    # Each replay is its own simulated world, kept under the shared data dir: its history (warnings, stops) must
    # never count in another world's guardrail, so it does not share the live steward's audit log.
    run_dir = settings.ensure_data_dir() / "runs" / f"{scenario.name}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    deps, cluster = simulated_deps(scenario, policy, make_planner(settings), data_dir=run_dir, language=language)
    index_dir = settings.runbook_index_dir or settings.data_dir / "runbooks-index"
    console = _console()
    if settings.runbooks_enabled and not settings.chroma_url and not index_dir.exists():
        with console.status(w["index"] + "..."):
            runbooks_from_settings(deps, settings)
    else:
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
    zone = settings.zone()

    def clock(moment: datetime) -> str:
        """HH:MM in the display zone; with the date once the run has crossed a day boundary."""
        local = moment.astimezone(zone)
        return f"{local:%H:%M}" if local.date() == scenario.start.astimezone(zone).date() else f"{local:%m-%d %H:%M}"

    scripted = ScriptedApprovals(scenario, service)  # the scenario's scripted human answers
    verdict_words = {"deny": w["refused"], "needs_approval": w["awaiting"], "allow": w["allowed"]}
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=console, transient=True, disable=args.json or not console.is_terminal)
    with bar:
        task = bar.add_task(w["progress"], total=len(times))
        for t in times:
            cluster.advance_to(t)
            service.expire_due()
            for answered in scripted.answer_due(t):
                a = answered.state.get("approval", {})
                who = w["answered"].format(decision=a.get("decision"), by=one_line(str(a.get("by"))),
                                           decision_zh="批准" if a.get("decision") == "approve" else "拒绝")
                asked = (answered.state.get("approval_requests") or [{}])[0].get("proposal", {})
                for o in answered.state.get("outcomes", []):
                    timeline.append(f"  {clock(cluster.now())}  {pad(action_label(o['action'], language), 16)} "
                                    f"{one_line(o['target']):<34} {pad(_why(asked.get('finding_kind'), language), 16)}"
                                    f"{w['level']} {o['level']}  {who}{'：' if language == 'zh' else ': '}"
                                    f"{status_label(o['status'], language)}")
            result = service.sweep(trigger="cli")
            outs = {o["id"]: o for o in result.state.get("outcomes", [])}
            for d in result.state.get("decisions", []):
                done = outs.get(d["id"], {}).get("status")
                status = status_label(done, language) if done else verdict_words[d["decision"]["verdict"]]
                timeline.append(f"  {clock(cluster.now())}  {pad(action_label(d['proposal']['action'], language), 16)} "
                                f"{one_line(d['proposal']['target']):<34} "
                                f"{pad(_why(d['proposal'].get('finding_kind'), language), 16)}"
                                f"{w['level']} {d['decision']['level']}  {status}")
            bar.advance(task)
    assert result is not None
    if args.json:
        print(json.dumps({"scenario": scenario.name, "run_dir": str(run_dir), "state": result.state,
                          "timeline": timeline, "pending_approvals": [a.model_dump(mode="json")
                                                                       for a in deps.approvals.pending()]},
                         default=str, ensure_ascii=False, indent=2))
        return 0
    about = scenario.description.strip().splitlines()[0] if scenario.description else ""
    print(w["header"].format(name=scenario.name, about=about))
    print(w["sweeping"].format(every=int(every // 60), start=f"{scenario.start.astimezone(zone):%Y-%m-%d %H:%M}",
                               end=clock(cluster.now()), zone=zone_suffix(zone, language),
                               n=len(times), sweeps=plural(len(times), "sweep"), planner=deps.planner.name) + "\n")
    if timeline and not args.once:
        print(w["timeline"])
        print("\n".join(timeline) + "\n")
    print(report_for_people(result.report, result.state, deps, zone))
    pending = deps.approvals.pending()
    if pending:
        print("\n" + w["waiting"])
        for a in pending:
            if language == "zh":
                print(f"  {a.id}  {action_label(a.action, language)} {one_line(a.target)}（{w['level']} {a.level}），"
                      f"{w['expires']} {settings.local(a.expires_at, language)}")
            else:
                print(f"  {a.id}  {a.action} {one_line(a.target)} ({w['level']} {a.level}), {w['expires']} "
                      f"{a.expires_at.astimezone(zone):%Y-%m-%d %H:%M} {settings.display_tz}")
        print(w["waiting_replay"].format(run_dir=run_dir))
    print(run_summary(deps, zone))
    print("\n" + w["audit"].format(path=deps.audit.path, count=deps.audit.count()))
    return 0


def run_summary(deps: StewardDeps, zone: tzinfo = UTC) -> str:
    """What the whole run found, did and saved, and one warning as its owner received it."""
    from agent.records.cost import money
    from agent.records.savings import compute_savings

    w = _words(deps.language)
    found = {(e.target, e.status) for e in deps.audit.entries(kind="finding", limit=1_000_000)}
    done = deps.audit.entries(kind="execution", status="executed", limit=100_000)
    count = {a: sum(1 for e in done if e.action == a) for a in ("notify", "terminate", "force_terminate",
                                                                "resize_pool")}
    savings = compute_savings(deps.audit, [], deps.clock.now(), deps.currency)
    targets = len({t for t, _ in found})
    if deps.language == "zh":
        summary = w["over_run"].format(findings=len(found), targets=targets, notify=count["notify"],
                                       terminate=count["terminate"], force=count["force_terminate"],
                                       resize=count["resize_pool"])
    else:
        summary = w["over_run"].format(findings=plural(len(found), "finding"), targets=plural(targets, "target"),
                                       notify=plural(count["notify"], "warning"),
                                       terminate=plural(count["terminate"], "graceful stop"),
                                       force=plural(count["force_terminate"], "forced stop"),
                                       resize=plural(count["resize_pool"], "pool resize"))
    lines = [
        "",
        summary,
        w["reclaimed"].format(hours=savings.reclaimed_gpu_hours, money=money(savings.reclaimed_money, deps.currency)),
    ]
    sent: list[Any] = getattr(deps.notifier, "sent", [])
    warning = next((m for m in sent if "SIGTERM" in m.body), sent[0] if sent else None)
    if warning is not None:
        at = f"{warning.at.astimezone(zone):%Y-%m-%d %H:%M} {zone}"
        lines += ["", w["warning_as"].format(who=one_line(warning.recipient), at=at)]
        lines += [f"  | {one_line(line)}" for line in warning.body.splitlines()]
    return "\n".join(lines)
