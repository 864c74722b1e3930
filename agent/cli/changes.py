"""`steward change record|list|impact`: the change records of docs/changes.md.

    steward change record --kind driver --target a100-pool --description "535.154 -> 550.54" [--at 2026-11-02T10:00Z]
    steward change list [--json]
    steward change impact [CHANGE_ID] [--json]     # the same span after each change against before it

The store is STEWARD_DATABASE_URL or STEWARD_DATA_DIR/changes.sqlite (the one the server and sweeps write);
incidents are counted from the audit log next to it.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.config.settings import Settings
from core.text import one_line

WORDS = {
    "en": {"recorded": "recorded change #{id} ({kind}) {target} at {at}", "known": "already recorded: change #{id}",
           "none": "no changes recorded", "unknown": "no change #{id}", "bad": "invalid {field}: {msg}",
           "header": "id  kind       at ({zone})          source    flagged  target: description"},
    "zh": {"recorded": "已记录变更 #{id}（{kind}）{target}，时间 {at}", "known": "已有此变更：#{id}",
           "none": "尚无变更记录", "unknown": "没有变更 #{id}", "bad": "字段 {field} 无效：{msg}",
           "header": "编号 类型       时间 ({zone})        来源      已标记   对象：说明"},
}


def _words(settings: Settings, args: argparse.Namespace) -> dict[str, str]:
    return WORDS[_lang(settings, args)]


def _lang(settings: Settings, args: argparse.Namespace) -> str:
    return "zh" if (getattr(args, "lang", None) or settings.language) == "zh" else "en"


def _where(settings: Settings, args: argparse.Namespace, name: str) -> str:
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    return str((args.data_dir or settings.data_dir) / f"{name}.sqlite")


def _stores(settings: Settings, args: argparse.Namespace, *, audit: bool) -> tuple[Any, Any]:
    from agent.records.changes import ChangeStore

    directory: Path = args.data_dir or settings.data_dir
    if settings.database_url is None:
        directory.mkdir(parents=True, exist_ok=True)
    log = None
    if audit:
        from agent.records.audit import AuditLog

        try:
            log = AuditLog(_where(settings, args, "audit"))
        except FileNotFoundError:
            log = None
    return ChangeStore(_where(settings, args, "changes")), log


def cmd_record(args: argparse.Namespace, settings: Settings) -> int:
    from agent.records.change_impact import record_change
    from agent.records.changes import ChangeInput, stamp

    words = _words(settings, args)
    try:
        body = ChangeInput(kind=args.kind, target=args.target, description=args.description or "", at=args.at)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "input"
        print(words["bad"].format(field=f"--{field}", msg=first["msg"]), file=sys.stderr)
        return 2
    now = datetime.now(UTC)
    at = body.at or now
    store, log = _stores(settings, args, audit=True)
    by = args.by or "cli"
    change, added = record_change(store, log, key=f"recorded:{body.kind}:{body.target}:{stamp(at)}", kind=body.kind,
                                  target=body.target, description=body.description, at=at, now=now,
                                  source="recorded", by=by, run_id="cli-change")
    if args.json:
        print(json.dumps({"change": change.model_dump(mode="json"), "recorded": added}, ensure_ascii=False, indent=2))
    else:
        print((words["recorded"] if added else words["known"]).format(
            id=change.id, kind=change.kind, target=change.target, at=settings.local(change.at, _lang(settings, args))))
    return 0


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    words = _words(settings, args)
    store, _ = _stores(settings, args, audit=False)
    found = store.changes(kind=args.kind, limit=args.limit)
    if args.json:
        print(json.dumps([c.model_dump(mode="json") for c in found], ensure_ascii=False, indent=2))
        return 0
    if not found:
        print(words["none"])
        return 0
    print(words["header"].format(zone=settings.display_tz))
    zone = settings.zone()
    for c in found:
        flagged = "yes" if c.flagged_at else "-"
        print(one_line(f"{c.id:<3} {c.kind:<10} {c.at.astimezone(zone):%Y-%m-%d %H:%M}  {c.source:<9} {flagged:<8} "
                       f"{c.target}: {c.description}"))
    return 0


def cmd_impact(args: argparse.Namespace, settings: Settings) -> int:
    from agent.records.change_impact import impact, render_impact

    words = _words(settings, args)
    store, log = _stores(settings, args, audit=True)
    if args.change_id is not None:
        one = store.get(args.change_id)
        if one is None:
            print(words["unknown"].format(id=args.change_id), file=sys.stderr)
            return 1
        chosen = [one]
    else:
        chosen = store.changes(limit=args.limit)
    now = args.now or datetime.now(UTC)
    reports = [impact(store, c, now, log) for c in chosen]
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in reports], ensure_ascii=False, indent=2))
        return 0
    if not reports:
        print(words["none"])
    lang = _lang(settings, args)
    print("\n\n".join(render_impact(r, lang) for r in reports))
    return 0


def _when(value: str) -> datetime:
    from agent.records.changes import RANGE_TEXT, in_range

    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {value!r} (e.g. 2026-11-02T10:00:00Z)") from None
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    if not in_range(at):  # 0001-01-01T00:00+01:00 has no UTC time: said here, never an OverflowError later
        raise argparse.ArgumentTypeError(f"{value!r}: {RANGE_TEXT}")
    return at


def register_cli(subparsers: Any) -> None:
    from agent.records.changes import KINDS

    change = subparsers.add_parser("change", help="record driver/CUDA/image/policy/scheduler changes; their impact")
    sub = change.add_subparsers(dest="change_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, help="the data dir (default: STEWARD_DATA_DIR)")
    common.add_argument("--lang", choices=["en", "zh"], help="language (default: STEWARD_LANGUAGE)")
    common.add_argument("--json", action="store_true", help="print JSON")
    record = sub.add_parser("record", parents=[common], help="record a change made by people")
    record.add_argument("--kind", required=True, choices=KINDS)
    record.add_argument("--target", required=True, help="what changed: a node, pool, image, namespace or 'cluster'")
    record.add_argument("--description", default="", help="what was done, e.g. '535.154 -> 550.54'")
    record.add_argument("--at", type=_when, help="when it happened (ISO 8601; default: now)")
    record.add_argument("--by", help="who made it (default: cli)")
    record.set_defaults(handler=cmd_record)
    listing = sub.add_parser("list", parents=[common], help="changes, newest first")
    listing.add_argument("--kind", choices=KINDS)
    listing.add_argument("--limit", type=int, default=50)
    listing.set_defaults(handler=cmd_list)
    report = sub.add_parser("impact", parents=[common],
                            help="each change's aftermath against the same span before it (default: the latest)")
    report.add_argument("change_id", nargs="?", type=int, help="one change (default: the latest --limit)")
    report.add_argument("--limit", type=int, default=10)
    report.add_argument("--now", type=_when, help=argparse.SUPPRESS)  # tests and replays: the report's 'now'
    report.set_defaults(handler=cmd_impact)
