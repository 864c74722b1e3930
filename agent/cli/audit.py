"""`steward audit verify|head`: check the audit log's hash chain, and export its head to detect a deleted tail.

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
        print(words["none"].format(path=shown), file=sys.stderr)
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
        print(words["none"].format(path=shown), file=sys.stderr)
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


def register_cli(subparsers: Any) -> None:
    audit = subparsers.add_parser("audit", help="check the audit log's hash chain, export its head")
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
    head = audit_sub.add_parser("head", parents=[common], help="print the newest entry's seq and hash (or --out FILE)")
    head.add_argument("--out", type=Path, metavar="FILE", help="write it to FILE")
    head.set_defaults(handler=cmd_head)
