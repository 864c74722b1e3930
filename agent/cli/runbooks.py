"""`steward runbooks check|index|search`: validate, (re)build and query the runbook index from a shell."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from agent.config.settings import Settings


def cmd_check(args: argparse.Namespace, settings: Settings) -> int:
    from agent.retrieval.runbooks import RUNBOOKS_DIR, RunbookError, chunk_runbook, load_runbooks

    try:
        books = load_runbooks(settings.runbooks_dir or RUNBOOKS_DIR)
    except RunbookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sections = sum(len(chunk_runbook(b)) for b in books)
    print(f"{len(books)} runbook files ({len({b.id for b in books})} ids), {sections} sections: ok")
    return 0


def cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    from agent.retrieval.index import open_runbook_index
    from agent.retrieval.runbooks import RunbookError

    index = open_runbook_index(settings)
    started = time.perf_counter()
    try:
        if args.force:
            index.rebuild()
            rebuilt = True
        else:
            rebuilt = index.ensure()
    except RunbookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    where = settings.chroma_url or str(index.index_dir)
    state = "rebuilt" if rebuilt else "up to date"
    print(f"runbook index {state}: {len(index.books)} files, {index.count()} sections in {where} "
          f"({time.perf_counter() - started:.1f}s, embedder {index.embedding.model})")
    return 0


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from agent.retrieval.index import open_runbook_index

    hits: list[dict[str, Any]] = open_runbook_index(settings).search(args.query, args.kind, args.k)
    if args.json:
        print(json.dumps(hits, ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no runbook matches")
        return 1
    # Ranked by the fusion of the embedding's and BM25's rankings: the rank leads, the section's cosine (0: found
    # by BM25 alone) is shown as what it is, so a lower cosine above a higher one reads as intended.
    for rank, h in enumerate(hits, 1):
        excerpt = " ".join(h["excerpt"].split())[:160]
        print(f"{rank}. {h['id']}  [{h['language']}/{h['section']}]  {h['title']}\n"
              f"   cosine {h['score']:.3f}, fused {h['rrf']:.4f}  {excerpt}")
    return 0


def register_cli(subparsers: Any) -> None:
    runbooks = subparsers.add_parser("runbooks", help="runbook files and their search index")
    sub = runbooks.add_subparsers(dest="runbooks_command", required=True)
    check = sub.add_parser("check", help="validate every runbook file")
    check.set_defaults(handler=cmd_check)
    index = sub.add_parser("index", help="build the index, or rebuild it if any runbook changed")
    index.add_argument("--force", action="store_true", help="rebuild even when nothing changed")
    index.set_defaults(handler=cmd_index)
    search = sub.add_parser("search", help="search the runbooks (English or Chinese)")
    search.add_argument("query")
    search.add_argument("--kind", choices=["idle", "zombie", "overprovisioned", "node_health", "oversized"])
    search.add_argument("-k", type=int, default=3)
    search.add_argument("--json", action="store_true")
    search.set_defaults(handler=cmd_search)
