"""`steward approvals list|approve|deny`: answer the steward's approval requests from a shell.

Works on the data dir `steward serve` and `steward sweep` on a real cluster use (STEWARD_DATA_DIR, or
--data-dir). An answer is taken exactly as the web UI takes it: recorded once in the approval store (a second
or late answer is refused and audited), audited, and then carried out by the steward itself (a running
`steward serve` before its next sweep, or the next `steward sweep` on a real cluster), which re-reads the
target and runs the guardrail on fresh facts first. The shell only decides; it never acts on the cluster.
Whoever can write the data dir can answer, so the answer names the local user (`cli:<user>`, or --by).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.config.settings import Settings

if TYPE_CHECKING:
    from agent.records.approvals import Approval

WORDS = {
    "en": {"none": "No approval requests in {dir}.", "pending": "Waiting for a human ({n}):",
           "recent": "Answered recently:", "expires": "expires", "level": "level", "nodes": "{n} nodes",
           "no_store": "error: no approval store in {dir} (`steward serve` keeps one there; or pass --data-dir DIR)",
           "taken": "{id}: {status} by {by}. Recorded and audited; the steward carries it out before its next sweep "
                    "(a running `steward serve`, or the next `steward sweep`), after re-checking the target.",
           "denied": "{id}: denied by {by}. Recorded and audited; nothing is done to the target, and the request "
                     "stays closed.",
           "refused": "error: not taken: {why}", "answer_with": "Answer: steward approvals approve|deny ID --reason TEXT"},
    "zh": {"none": "{dir} 中没有审批请求。", "pending": "等待人工审批（{n} 项）：", "recent": "最近的处理：",
           "expires": "过期时间", "level": "级别", "nodes": "{n} 个节点",
           "no_store": "错误：{dir} 中没有审批库（`steward serve` 会在此保存；或用 --data-dir 指定目录）",
           "taken": "{id}：已由 {by} {status_zh}。已记录并写入审计；巡检服务会在下一次巡检前（运行中的 `steward serve`，"
                    "或下一次 `steward sweep`）重新检查目标后执行。",
           "denied": "{id}：已由 {by} 拒绝。已记录并写入审计；不会对目标执行任何操作，该请求已关闭。",
           "refused": "错误：未受理：{why}", "answer_with": "处理：steward approvals approve|deny ID --reason 原因"},
}


def _words(args: argparse.Namespace, settings: Settings) -> dict[str, str]:
    return WORDS["zh" if (args.lang or settings.language) == "zh" else "en"]


def _open(approvals: str, audit_at: str) -> Any:
    from agent.records.approvals import ApprovalStore
    from agent.records.audit import AuditLog

    audit = AuditLog(audit_at)
    store = ApprovalStore(approvals, audit)
    # Its own claim holder: a server on this host cannot take the answer over while this process audits it.
    store.holder = f"{socket.gethostname() or 'localhost'}/cli-{os.getpid()}"
    return store


def data_dir_now(data_dir: Path, settings: Settings) -> datetime:
    """The data dir's clock: the simulated one `steward serve` left there (sim-clock.json), else the wall clock."""
    state = data_dir / "sim-clock.json"
    if settings.backend == "sim" and state.is_file():
        from sim.scenario import demo_scenario_path, load_scenario

        saved = json.loads(state.read_text(encoding="utf-8"))
        scenario = load_scenario(settings.scenario or demo_scenario_path())
        if saved.get("scenario") == scenario.name:
            from datetime import timedelta

            return scenario.start + timedelta(seconds=float(saved.get("offset_s", 0)))
    return datetime.now(UTC)


def _existing_store(args: argparse.Namespace, settings: Settings, w: dict[str, str]) -> Any:
    """The steward's approval store: --data-dir's, else STEWARD_DATABASE_URL's Postgres (shared by every replica),
    else the data dir's; None (said on stderr) when the data dir has none: never create one."""
    if args.data_dir is None and settings.database_url is not None:
        return _open(settings.store("approvals"), settings.store("audit"))
    data_dir = args.data_dir or settings.data_dir
    if not (data_dir / "approvals.sqlite").is_file():
        from agent.cli.errors import replay_hint

        hint = "" if args.data_dir is not None else replay_hint(data_dir, "approvals.sqlite",
                                                                 "zh" if w is WORDS["zh"] else "en")
        print(w["no_store"].format(dir=data_dir) + hint, file=sys.stderr)
        return None
    return _open(str(data_dir / "approvals.sqlite"), str(data_dir / "audit.sqlite"))


def _size(a: Approval, w: dict[str, str]) -> str:
    """A resize names the node count approving carries out."""
    nodes = ((a.payload.get("guarded_action") or {}).get("proposal") or {}).get("target_nodes")
    arrow = "→" if w is WORDS["zh"] else "->"
    return f" {arrow} {w['nodes'].format(n=nodes)}" if a.action == "resize_pool" and nodes is not None else ""


# An answer in Chinese, as a verb after who gave it and when ("cli:bob 于 … 批准").
_ANSWERED_ZH = {"approved": "批准", "denied": "拒绝", "expired": "过期"}


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    from agent.graph.report import action_label, status_label
    from core.text import one_line

    w = _words(args, settings)
    lang = "zh" if (args.lang or settings.language) == "zh" else "en"
    data_dir = args.data_dir or settings.data_dir
    store = _existing_store(args, settings, w)
    if store is None:
        return 2
    pending = store.pending()
    recent = [a for a in store.all(limit=args.limit) if a.status != "pending"][-args.limit:]
    if args.json:
        print(json.dumps({"data_dir": str(data_dir), "pending": [a.model_dump(mode="json") for a in pending],
                          "recent": [a.model_dump(mode="json") for a in recent]}, ensure_ascii=False, indent=2))
        return 0
    if not pending and not recent:
        print(w["none"].format(dir=data_dir))
        return 0
    if pending:
        print(w["pending"].format(n=len(pending)))
        for a in pending:
            if lang == "zh":
                print(one_line(f"  {a.id}  {action_label(a.action, lang)} {a.target}{_size(a, w)}（{w['level']} "
                               f"{a.level}），{w['expires']} {settings.local(a.expires_at, lang)}"))
                continue
            print(one_line(f"  {a.id}  {action_label(a.action, lang)} {a.target}{_size(a, w)} ({w['level']} "
                           f"{a.level}), {w['expires']} {settings.local(a.expires_at, lang)}"))
        print(w["answer_with"])
    if recent:
        print(("\n" if pending else "") + w["recent"])
        for a in recent:
            when = settings.local(a.answered_at, lang) if a.answered_at else ""
            if lang == "zh":  # "apr_x  调整节点池 a100：cli:bob 于 2026-11-02 20:50（北京时间）批准，理由：…"
                done = status_label(a.status, lang)
                if a.status in _ANSWERED_ZH and when:
                    done = f"{a.answered_by + ' ' if a.answered_by else ''}于 {when}{_ANSWERED_ZH[a.status]}"
                reason = f"，理由：{a.answer_reason}" if a.answer_reason else ""
                print(one_line(f"  {a.id}  {action_label(a.action, lang)} {a.target}：{done}{reason}"))
                continue
            why = f": {a.answer_reason}" if a.answer_reason else ""
            print(one_line(f"  {a.id}  {action_label(a.action, lang)} {a.target}: {status_label(a.status, lang)} "
                           f"{when} {a.answered_by or ''}{why}".rstrip()))
    return 0


def cmd_answer(args: argparse.Namespace, settings: Settings) -> int:
    from agent.records.approvals import ApprovalError

    w = _words(args, settings)
    data_dir = args.data_dir or settings.data_dir
    store = _existing_store(args, settings, w)
    if store is None:
        return 2
    by = args.by or f"cli:{getpass.getuser()}"
    decision = "approve" if args.approvals_command == "approve" else "deny"
    try:
        taken = store.answer(args.id, decision=decision, by=by, reason=args.reason or ("通过 steward approvals 命令" if w is WORDS["zh"] else "via steward approvals"),
                             now=data_dir_now(data_dir, settings), run_id=args.id)
    except ApprovalError as exc:
        print(w["refused"].format(why=exc.zh if w is WORDS["zh"] else exc), file=sys.stderr)
        return 1
    try:
        store.audit_answer(taken)  # the server skips it when it completes the answer
    finally:
        store.release(taken.id)  # whichever steward sweeps next completes it
    print(w["taken" if taken.status == "approved" else "denied"].format(id=taken.id, status=taken.status, by=by,
                                                                        status_zh="批准"))
    return 0


def register_cli(subparsers: Any) -> None:
    parser = subparsers.add_parser("approvals", help="list and answer approval requests (the data dir serve uses)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="approvals_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, help="the steward's data dir (default: STEWARD_DATA_DIR, "
                                                      "~/.local/share/gpu-steward)")
    common.add_argument("--lang", choices=["en", "zh"], help="language of the output (default: STEWARD_LANGUAGE)")
    listing = sub.add_parser("list", parents=[common], help="pending requests, and the recent answers")
    listing.add_argument("--limit", type=int, default=20, help="recent answers to show (default 20)")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(handler=cmd_list)
    for name, what in (("approve", "approve a request: the steward then carries it out after re-checking"),
                       ("deny", "deny a request: nothing is done")):
        answer = sub.add_parser(name, parents=[common], help=what)
        answer.add_argument("id", help="the request's id (apr_...), from `steward approvals list`")
        answer.add_argument("--reason", help="why, kept in the audit log")
        answer.add_argument("--by", help="who answers (default: cli:<your login name>)")
        answer.set_defaults(handler=cmd_answer)
