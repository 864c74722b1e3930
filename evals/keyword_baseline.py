"""A plain keyword baseline for runbook retrieval: BM25 over the same sections, Chinese cut into characters and bigrams."""

from __future__ import annotations

import re
from typing import Any

from agent.runbooks import Chunk

_WORD = re.compile(r"[a-z0-9][a-z0-9_.:/-]*")
_CJK = re.compile(r"[\u4e00-\u9fff]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased ASCII words; every CJK run as its characters plus its bigrams."""
    low = text.lower()
    tokens = [w.strip(".:/-") for w in _WORD.findall(low)]
    for run in _CJK.findall(low):
        tokens.extend(run)
        tokens.extend(run[i:i + 2] for i in range(len(run) - 1))
    return [t for t in tokens if t]


class KeywordIndex:
    def __init__(self, chunks: list[Chunk]) -> None:
        from rank_bm25 import BM25Okapi

        self.chunks = chunks
        self.bm25 = BM25Okapi([tokenize(c.text) for c in chunks])

    def search(self, query: str, kind: str | None = None, k: int = 3) -> list[dict[str, Any]]:
        scores = self.bm25.get_scores(tokenize(query))
        order = sorted(range(len(self.chunks)), key=lambda i: -scores[i])
        hits: dict[str, dict[str, Any]] = {}
        for i in order:
            c = self.chunks[i]
            if kind and kind not in c.kinds:
                continue
            if c.runbook_id not in hits:
                hits[c.runbook_id] = {"id": c.runbook_id, "title": c.title, "language": c.language,
                                      "section": c.section, "excerpt": c.body[:400], "score": float(scores[i])}
            if len(hits) == k:
                break
        return list(hits.values())
