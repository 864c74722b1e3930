"""Runbook retrieval eval: recall@1, recall@3 and MRR of embedding, BM25 and hybrid search, Chinese and English apart.

    python -m evals.retrieval_eval [--embedder e5-small|use-v3] [--bench-sections 1000] [--show-misses]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from agent.retrieval.index import RunbookIndex
from agent.retrieval.runbooks import RUNBOOKS_DIR, chunk_runbook, load_runbooks

QUERIES = Path(__file__).resolve().parent / "retrieval_queries.yaml"
UNSEEN = Path(__file__).resolve().parent / "retrieval_queries_unseen.yaml"  # written outside the team
Search = Callable[[str, str | None, int], list[dict[str, Any]]]
METHODS = {"embedding": ("embedding",), "BM25": ("bm25",), "hybrid (RRF)": ("embedding", "bm25")}
LANGUAGES = ("zh", "en", "all")  # zh: the query has Chinese in it (pure or mixed)


def load_queries(path: Path = QUERIES, *, held_out: bool = False) -> list[dict[str, Any]]:
    """The labelled queries, or with `held_out` only the held-out ones (never used to choose anything)."""
    return [q for q in yaml.safe_load(path.read_text(encoding="utf-8"))["queries"] if bool(q.get("held_out")) == held_out]


def is_chinese(text: str) -> bool:
    return re.search(r"[\u4e00-\u9fff]", text) is not None


def score(search: Search, queries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per language (zh, en, all): n, recall@1, recall@3, MRR over the top 10; plus per-query latency (ms) and misses at 3."""
    rows: list[tuple[str, int | None]] = []
    latencies, misses = [], []
    for item in queries:
        started = time.perf_counter()
        ids = [h["id"] for h in search(item["q"], None, 10)]
        latencies.append((time.perf_counter() - started) * 1000)
        rank = next((i + 1 for i, rid in enumerate(ids) if rid in item["expect"]), None)
        rows.append(("zh" if is_chinese(item["q"]) else "en", rank))
        if rank is None or rank > 3:
            misses.append(f"{item['q']!r} -> {ids[:3]} (want {item['expect']})")
    out: dict[str, Any] = {"latencies": latencies, "misses": misses}
    for lang in LANGUAGES:
        ranks = [rank for q_lang, rank in rows if lang in ("all", q_lang)]
        n = len(ranks) or 1
        out[lang] = {"n": len(ranks), "recall@1": sum(r == 1 for r in ranks) / n,
                     "recall@3": sum(r is not None and r <= 3 for r in ranks) / n,
                     "mrr": sum(1 / r for r in ranks if r) / n}
    return out


def evaluate(index: RunbookIndex, queries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`score` for each search method of the index: embedding only, BM25 only, and the shipped hybrid."""
    return {name: score(partial(index.search, methods=methods), queries) for name, methods in METHODS.items()}


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def synthesize(directory: Path, out: Path, sections: int, seed: int = 7) -> int:
    """Write variants of the shipped runbooks (new ids, reordered items, other numbers) until `sections` chunks exist."""
    rng = random.Random(seed)
    books = load_runbooks(directory)
    files = {b.path: (directory / b.path).read_text(encoding="utf-8") for b in books}
    per_copy = sum(len(chunk_runbook(b)) for b in books)
    written, copy = 0, 0
    while written < sections:
        copy += 1
        for b in books:
            front, _, body = files[b.path].partition("\n---\n")
            front = front.replace(f"id: {b.id}\n", f"id: {b.id}-v{copy}\n", 1)
            body = re.sub(r"\b([1-9]\d{1,2})\b", lambda m: str(int(m.group(1)) + rng.randint(1, 9)), body)
            text = f"{front}\n---\n{body}"
            lines = text.split("\n")
            bullets = [i for i, line in enumerate(lines) if line.startswith("- ")]
            shuffled = [lines[i] for i in bullets]
            rng.shuffle(shuffled)
            for i, line in zip(bullets, shuffled, strict=True):
                lines[i] = line
            (out / b.path.replace(".md", f".v{copy}.md")).write_text("\n".join(lines), encoding="utf-8")
        written += per_copy
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", default="e5-small")
    parser.add_argument("--runbooks", type=Path, default=RUNBOOKS_DIR)
    parser.add_argument("--bench-sections", type=int, default=1000, help="0 skips the large-index benchmark")
    parser.add_argument("--show-misses", action="store_true")
    args = parser.parse_args(argv)

    queries, held_out = load_queries(), load_queries(held_out=True)
    unseen = load_queries(UNSEEN)
    zh = sum(is_chinese(q["q"]) for q in queries)
    chunks = [c for b in load_runbooks(args.runbooks) for c in chunk_runbook(b)]
    print(f"{len(queries)} labelled queries ({zh} with Chinese, {len(queries) - zh} English) and {len(held_out)} "
          f"held out; {len(chunks)} sections from {len({c.runbook_id for c in chunks})} runbooks in {args.runbooks}")

    with tempfile.TemporaryDirectory() as tmp:
        index = RunbookIndex(args.runbooks, index_dir=Path(tmp) / "index", embedder=args.embedder)
        started = time.perf_counter()
        index.ensure()
        build_s = time.perf_counter() - started
        index.search("warm up", None, 1)
        print(f"\nindex build (cold, embeds every section): {build_s:.1f}s; embedder {args.embedder}")
        for title, subset in (("labelled queries", queries), ("held-out queries", held_out),
                              ("queries written outside the team (evals/retrieval_queries_unseen.yaml)", unseen)):
            if not subset:
                continue
            results = evaluate(index, subset)
            print(f"\n{title}\n{'method':<14} {'queries':<8} {'recall@1':>9} {'recall@3':>9} {'MRR':>6} "
                  f"{'p50 ms':>7} {'p95 ms':>7}")
            for name, r in results.items():
                lat = r["latencies"]
                for lang in LANGUAGES:
                    m = r[lang]
                    group = f"{lang} ({m['n']})"
                    timing = f" {statistics.median(lat):>7.1f} {percentile(lat, 95):>7.1f}" if lang == "all" else ""
                    print(f"{name:<14} {group:<8} {m['recall@1']:>9.3f} {m['recall@3']:>9.3f} {m['mrr']:>6.3f}{timing}")
            if args.show_misses:
                for name, r in results.items():
                    print(f"\nmisses at 3, {name} ({title}):")
                    print("\n".join(f"  {m}" for m in r["misses"]) or "  none")

    if args.bench_sections:
        with tempfile.TemporaryDirectory() as tmp:
            corpus = Path(tmp) / "runbooks"
            corpus.mkdir()
            n = synthesize(args.runbooks, corpus, args.bench_sections)
            big = RunbookIndex(corpus, index_dir=Path(tmp) / "index", embedder=args.embedder)
            started = time.perf_counter()
            big.ensure()
            build_s = time.perf_counter() - started
            lat = []
            for item in queries:
                t = time.perf_counter()
                big.search(item["q"], None, 3)
                lat.append((time.perf_counter() - t) * 1000)
            print(f"\nbenchmark: {n} synthesized sections indexed in {build_s:.1f}s "
                  f"({n / build_s:.1f} sections/s); query p50 {statistics.median(lat):.1f} ms, "
                  f"p95 {percentile(lat, 95):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
