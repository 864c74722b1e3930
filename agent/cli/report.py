"""`steward report --since 7d [--out DIR] [--lang en|zh] [--audit PATH]`: the cost and savings report.

Reads the audit log `steward serve` keeps (STEWARD_DATA_DIR/audit.sqlite, or the Postgres store) when it has usage
samples, else the newest replay `steward sweep` left under STEWARD_DATA_DIR/runs/. Writes report.html (inline SVG
charts, no script) and digest.md (for a DingTalk or WeCom message) into --out, and prints the digest.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.cli.errors import ConfigurationError
from agent.config.settings import Settings
from agent.graph.cost_report import render_html, render_markdown
from agent.records.audit import AuditLog
from agent.records.usage import build_report


def _has_usage(audit: AuditLog) -> bool:
    return audit.count("usage") > 0


def find_audit(settings: Settings, explicit: Path | None) -> tuple[AuditLog, str]:
    """The audit log to report on, and where it is (for the reader)."""
    if explicit is not None:
        if not explicit.exists():
            raise ConfigurationError(f"--audit {explicit}: no such file")
        return AuditLog(explicit, readonly=True), str(explicit)
    store = settings.store("audit")
    if settings.database_url or Path(store).exists():
        live = AuditLog(store, readonly=True)
        if _has_usage(live):
            return live, live.path
    runs = sorted((settings.data_dir / "runs").glob("*/audit.sqlite"), key=lambda p: p.stat().st_mtime)
    for path in reversed(runs):
        replay = AuditLog(path, readonly=True)
        if _has_usage(replay):
            return replay, str(path)
    raise ConfigurationError(
        f"no usage recorded under {settings.data_dir}: run `steward sweep` (the demo) or `steward serve` first, "
        "or name an audit log with --audit")


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from agent.cli.main import back_from

    lang = args.lang or settings.language
    audit, where = find_audit(settings, args.audit)
    newest = audit.entries(kind="usage", limit=1)
    until = newest[0].at
    # A --since reaching back past the calendar's first day (99999999d) is everything: from the first usage sample.
    since = back_from(until, args.since) or audit.entries(kind="usage", limit=1, newest_first=False)[0].at
    report = build_report(audit, since, until)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    zone = settings.zone()
    (out / "report.html").write_text(render_html(report, lang, zone), encoding="utf-8")
    digest = render_markdown(report, lang, zone=zone)
    (out / "digest.md").write_text(digest, encoding="utf-8")
    print(digest)
    print(("来源：" if lang == "zh" else "source: ") + where)
    print(("已写入：" if lang == "zh" else "written: ") + f"{out / 'report.html'}, {out / 'digest.md'}")
    return 0


def register_cli(subparsers: Any) -> None:
    from agent.cli.main import _duration

    p = subparsers.add_parser("report", help="cost and savings report: HTML with charts and a markdown digest")
    p.add_argument("--since", type=_duration, default=7 * 86400.0, help="period before the latest sweep (default 7d)")
    p.add_argument("--out", type=Path, default=Path("steward-report"), help="folder to write into "
                                                                           "(default ./steward-report)")
    p.add_argument("--lang", choices=["en", "zh"], help="language (default: STEWARD_LANGUAGE)")
    p.add_argument("--audit", type=Path, help="an audit log file (default: the data dir's, else the newest replay)")
    p.set_defaults(handler=cmd_report)
