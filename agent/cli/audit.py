"""`steward audit log|verify|head`: read what the steward did, check the audit log's hash chain, and export its
head to detect a deleted tail.

    steward audit log --since 1d --target gpu/idle1  # what was done, refused or failed, newest last
    steward audit head --out head.json           # keep this somewhere the steward cannot write
    steward audit verify --expect-head head.json # later: exit 1 and the first bad entry if anything changed

Both only read the log (it may be in use by a running server).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.config.settings import Settings
from agent.records import pg
from agent.records.audit import KINDS

WORDS = {
    "en": {"ok": "audit log {path}: {text}", "bad": "audit log {path} is NOT intact:", "none": "no audit log at {path}",
           "head_file": "{file}: {error}", "wrote": "head seq {seq} written to {file}", "empty": "audit log {path} is empty"},
    "zh": {"ok": "审计日志 {path}：校验通过。{text}", "bad": "审计日志 {path} 已被篡改或损坏：", "none": "{path} 处没有审计日志",
           "head_file": "{file}：{error}", "wrote": "已将链头（序号 {seq}）写入 {file}", "empty": "审计日志 {path} 为空"},
}


def _words(settings: Settings, args: argparse.Namespace) -> dict[str, str]:
    return WORDS["zh" if (args.lang or settings.language) == "zh" else "en"]


def _log_path(args: argparse.Namespace, settings: Settings) -> str:
    """The audit log: --data-dir's file, else STEWARD_DATABASE_URL's Postgres (where every replica writes), else
    the data dir's file."""
    if args.data_dir is None and settings.database_url is not None:
        return settings.store("audit")
    return str((args.data_dir or settings.data_dir) / "audit.sqlite")


def _hint(args: argparse.Namespace, settings: Settings) -> str:
    """Where the newest demo sweep's audit log is, when none is where the command looked (agent/cli/errors.py)."""
    from agent.cli.errors import replay_hint

    if args.data_dir is not None or settings.database_url is not None:
        return ""
    return replay_hint(settings.data_dir, "audit.sqlite", "zh" if (args.lang or settings.language) == "zh" else "en")


def _open(path: str) -> Any:
    from agent.records.audit import AuditLog

    return AuditLog(path, readonly=True)


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    from agent.records.audit import Head

    words = _words(settings, args)
    path = _log_path(args, settings)
    shown = pg.redact(path)  # a Postgres URL without its password
    expect = None
    if args.expect_head is not None:
        try:
            expect = Head.from_json(json.loads(args.expect_head.read_text(encoding="utf-8")), str(args.expect_head))
        except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
            print(words["head_file"].format(file=args.expect_head, error=exc), file=sys.stderr)
            return 2
    try:
        log = _open(path)
    except FileNotFoundError:
        print(words["none"].format(path=shown) + _hint(args, settings), file=sys.stderr)
        return 2
    try:
        result = log.verify(expect_head=expect)
    finally:
        log.close()
    if args.json:
        print(json.dumps({"log": shown, "ok": result.ok, "entries": result.entries, "legacy": result.legacy,
                          "head": result.head.to_json() if result.head else None, "bad_seq": result.bad_seq,
                          "bad_entry": result.bad_entry or None, "problem": result.problem or None,
                          "notes": result.notes}, ensure_ascii=False, indent=2))
    elif result.ok and words is WORDS["zh"]:
        older = f"（另有 {result.legacy} 条早于哈希链，不受保护）" if result.legacy else ""
        head = f"链头序号 {result.head.seq}，sha256 {result.head.hash}" if result.head else "为空"
        print(words["ok"].format(path=shown, text=f"共 {result.entries} 条记录{older}；{head}"))
    elif result.ok:
        print(words["ok"].format(path=shown, text=result.describe()))
    else:
        print(words["bad"].format(path=shown))
        print(result.describe())
    return 0 if result.ok else 1


def cmd_head(args: argparse.Namespace, settings: Settings) -> int:
    words = _words(settings, args)
    path = _log_path(args, settings)
    shown = pg.redact(path)
    try:
        log = _open(path)
    except FileNotFoundError:
        print(words["none"].format(path=shown) + _hint(args, settings), file=sys.stderr)
        return 2
    try:
        head = log.head()
    finally:
        log.close()
    if head is None:
        print(words["empty"].format(path=shown), file=sys.stderr)
        return 1
    doc = {**head.to_json(), "log": shown, "exported_at": datetime.now(UTC).isoformat()}
    text = json.dumps(doc, indent=2)
    if args.out is None:
        print(text)
        return 0
    try:
        args.out.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        print(words["head_file"].format(file=args.out, error=exc), file=sys.stderr)
        return 2
    print(words["wrote"].format(seq=head.seq, file=args.out))
    return 0


# What each sweep saw (findings, report, usage, a job seen answering requests) and its working notes (a proposal
# before the guardrail's decision, an intent before the act), not what it did: shown with --kind or --all.
NOT_ACTIONS = ("report", "usage", "finding", "served", "proposal", "intent")
PAGE = 500


def cmd_log(args: argparse.Namespace, settings: Settings) -> int:
    """The entries people ask about: what was warned, stopped, refused, asked or failed, oldest first."""
    from agent.cli.main import back_from
    from agent.graph.report import audit_heading, audit_text, outcome_text
    from core.text import one_line
    from core.zones import zone_suffix

    words = _words(settings, args)
    path = _log_path(args, settings)
    try:
        log = _open(path)
    except FileNotFoundError:
        print(words["none"].format(path=pg.redact(path)) + _hint(args, settings), file=sys.stderr)
        return 2
    # A --since reaching back past the calendar's first day (99999999d) is everything.
    since = back_from(datetime.now(UTC), args.since) if args.since else None
    quiet = () if args.kind or args.all else NOT_ACTIONS  # each sweep's findings, report, usage: --kind or --all
    entries: list[Any] = []
    try:
        offset = 0
        while len(entries) < args.limit:
            page = log.entries(kind=args.kind, target=args.target, status=args.status, since=since, limit=PAGE,
                               offset=offset)
            entries += [e for e in page if e.kind not in quiet]
            offset += PAGE
            if len(page) < PAGE:
                break
        # Nothing in the period: say when the newest entry is, so a log kept on another clock (a demo run's
        # simulated day) or an idle steward reads as such, not as an empty log.
        older = [e for e in log.entries(kind=args.kind, target=args.target, status=args.status, limit=PAGE)
                 if e.kind not in quiet and e.at < since][:1] if since is not None and not entries else []
    finally:
        log.close()
    entries = entries[: args.limit]
    entries.reverse()  # oldest first, as a log reads
    if args.json:
        print(json.dumps([e.model_dump(mode="json", exclude={"prev_hash", "hash"}) for e in entries],
                         ensure_ascii=False, indent=2))
        return 0
    lang = "zh" if words is WORDS["zh"] else "en"
    zone = settings.zone()
    for e in entries:
        when = e.at.astimezone(zone) if e.at.tzinfo else e.at.replace(tzinfo=UTC).astimezone(zone)
        # The target and the reason may be the cluster's text (a Slurm job's name holds anything): one line each,
        # controls escaped, so no entry prints a line that reads as another entry's or drives the terminal.
        target = one_line(e.target) if e.target is not None else None
        reason = one_line(e.reason) if e.reason is not None else None
        what = one_line(audit_heading(e.kind, e.status, e.action, target, lang))
        why = audit_text(e.kind, e.status, e.action, target, reason, e.data, lang, zone).strip().splitlines()
        if lang == "zh" and e.kind == "execution":  # the heading names the action and its status already
            why = outcome_text(e.action or "", e.status or "", one_line(str(e.data.get("detail") or "")),
                               reason or "", lang).strip().splitlines()
        why = [one_line(line) for line in why]
        if why and lang == "zh" and why[0] in what:  # the heading says it already ("答复未受理 答复未受理")
            why = []
        # The time in the display zone, named, as the times in the entry's text are.
        print(f"{when:%Y-%m-%d %H:%M}{zone_suffix(zone, lang)} {what}" + (f"  {why[0]}" if why else ""))
    if not entries:
        print("（无记录）" if lang == "zh" else "(no entries)")
    if not entries and older:
        at = older[0].at if older[0].at.tzinfo else older[0].at.replace(tzinfo=UTC)
        newest = f"{at.astimezone(zone):%Y-%m-%d %H:%M}{zone_suffix(zone, lang)}"
        print(f"（--since 从现在往回计；最新一条记录在 {newest}：演示运行的记录使用模拟时间）" if lang == "zh" else
              f"(--since counts back from now; the newest entry is from {newest}: a demo run's entries carry its "
              "simulated times)")
    return 0


def register_cli(subparsers: Any) -> None:
    from agent.cli.main import _duration

    audit = subparsers.add_parser("audit", help="read what the steward did; check the audit log's hash chain")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, help="the data dir holding audit.sqlite (default: STEWARD_DATA_DIR)")
    common.add_argument("--lang", choices=["en", "zh"], help="language of the verdict (default: STEWARD_LANGUAGE)")
    verify = audit_sub.add_parser("verify", parents=[common],
                                  help="check sequence and hash chain; exit 1 naming the first bad entry")
    verify.add_argument("--expect-head", type=Path, metavar="FILE",
                        help="a head written earlier by `steward audit head`: the log must still contain it")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=cmd_verify)
    entries = audit_sub.add_parser("log", parents=[common], help="what was warned, stopped, refused, asked or failed "
                                   "(oldest first; times in STEWARD_DISPLAY_TZ)")
    entries.add_argument("--since", type=_duration, help="only this far back, e.g. 1d or 6h (default: all)")
    entries.add_argument("--target", help="one job, node or pool (e.g. ml/notebook)")
    entries.add_argument("--kind", choices=KINDS, metavar="KIND",
                         help=f"one kind: {', '.join(KINDS)}")
    entries.add_argument("--status", help="one status: executed, refused, failed, blocked, pending_approval, ...")
    entries.add_argument("--limit", type=int, default=50, help="the newest N entries (default 50)")
    entries.add_argument("--all", action="store_true", help="also each sweep's findings, report and usage entries")
    entries.add_argument("--json", action="store_true")
    entries.set_defaults(handler=cmd_log)
    head = audit_sub.add_parser("head", parents=[common], help="print the newest entry's seq and hash (or --out FILE)")
    head.add_argument("--out", type=Path, metavar="FILE", help="write it to FILE")
    head.set_defaults(handler=cmd_head)
