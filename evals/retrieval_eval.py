"""Runbook retrieval eval: recall@1, recall@3 and MRR for the embedding index and a BM25 baseline, plus timings.

    python -m evals.retrieval_eval [--embedder e5-small|use-v3] [--bench-sections 1000]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from agent.runbook_index import RunbookIndex
from agent.runbooks import RUNBOOKS_DIR, chunk_runbook, load_runbooks
from evals.keyword_baseline import KeywordIndex

QUERIES = Path(__file__).resolve().parent / "retrieval_queries.yaml"
Search = Callable[[str, str | None, int], list[dict[str, Any]]]


def load_queries(path: Path = QUERIES) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))["queries"]


def is_chinese(text: str) -> bool:
    return re.search(r"[\u4e00-\u9fff]", text) is not None


def score(search: Search, queries: list[dict[str, Any]]) -> dict[str, Any]:
    """recall@1, recall@3, MRR over the top 10, and per-query latency in ms."""
    r1 = r3 = rr = 0.0
    latencies, misses = [], []
    for item in queries:
        started = time.perf_counter()
        ids = [h["id"] for h in search(item["q"], None, 10)]
        latencies.append((time.perf_counter() - started) * 1000)
        rank = next((i + 1 for i, rid in enumerate(ids) if rid in item["expect"]), None)
        r1 += rank == 1
        r3 += rank is not None and rank <= 3
        rr += 1 / rank if rank else 0.0
        if rank is None or rank > 3:
            misses.append(f"{item['q']!r} -> {ids[:3]} (want {item['expect']})")
    n = len(queries)
    return {"recall@1": r1 / n, "recall@3": r3 / n, "mrr": rr / n, "latencies": latencies, "misses": misses}


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

    queries = load_queries()
    zh = sum(is_chinese(q["q"]) for q in queries)
    chunks = [c for b in load_runbooks(args.runbooks) for c in chunk_runbook(b)]
    print(f"{len(queries)} labelled queries ({zh} with Chinese); {len(chunks)} sections from "
          f"{len({c.runbook_id for c in chunks})} runbooks in {args.runbooks}")

    with tempfile.TemporaryDirectory() as tmp:
        index = RunbookIndex(args.runbooks, index_dir=Path(tmp) / "index", embedder=args.embedder)
        started = time.perf_counter()
        index.ensure()
        build_s = time.perf_counter() - started
        index.search("warm up", None, 1)
        results = {f"embedding ({args.embedder})": score(index.search, queries),
                   "BM25 keyword baseline": score(KeywordIndex(chunks).search, queries)}
        print(f"\nindex build (cold, embeds every section): {build_s:.1f}s\n")
        print(f"{'retriever':<28} {'recall@1':>9} {'recall@3':>9} {'MRR':>6} {'p50 ms':>7} {'p95 ms':>7}")
        for name, r in results.items():
            lat = r["latencies"]
            print(f"{name:<28} {r['recall@1']:>9.3f} {r['recall@3']:>9.3f} {r['mrr']:>6.3f} "
                  f"{statistics.median(lat):>7.1f} {percentile(lat, 95):>7.1f}")
        for lang, pick in (("en only", lambda q: not is_chinese(q["q"])), ("with Chinese", lambda q: is_chinese(q["q"]))):
            sub = [q for q in queries if pick(q)]
            parts = [f"{name.split(' ')[0]} r@3={score(s, sub)['recall@3']:.3f}"
                     for name, s in (("embedding", index.search), ("BM25", KeywordIndex(chunks).search))]
            print(f"  {lang:<13} ({len(sub)} queries): " + ", ".join(parts))
        if args.show_misses:
            for name, r in results.items():
                print(f"\nmisses at 3, {name}:")
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
