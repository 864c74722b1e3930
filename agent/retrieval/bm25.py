"""BM25 over runbook sections: the keyword half of the hybrid runbook search (agent/retrieval/index.py).

Chinese is cut into words by jieba (search mode: a long word also yields its shorter words; the
dictionary ships inside the package), other text into lower-cased letter/digit words. Punctuation,
whitespace and a few stop words are dropped.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence

import jieba
from rank_bm25 import BM25Okapi

from agent.retrieval.runbooks import Chunk

jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict ..." on stderr

_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script; "100%" -> "100", "DCGM_FI" -> "dcgm", "fi"
STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "in", "is", "it", "of", "on",
    "or", "the", "this", "that", "to", "was", "what", "when", "why", "with",
    "的", "了", "是", "在", "和", "与", "或", "吗", "呢", "吧", "啊", "着", "把", "被", "也", "就", "都", "很", "我", "你",
    "他", "这", "那", "么",
})


_LATIN = re.compile(r"[a-z]{5,}")


def stem(word: str) -> str:
    """An English word's stem, lightly: plural, -ing, -ed, -er and a final -e dropped (nodes/node, slower/slow,
    throttling/throttled/throttle), so a query and a runbook meet whatever form each wrote. Other words as they are."""
    if not _LATIN.fullmatch(word):
        return word
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("er", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4 and not word.endswith("ss"):
            word = word[: -len(suffix)] + keep
            break
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def tokenize(text: str) -> list[str]:
    """Words for BM25: jieba's search-mode cut of the lower-cased text, punctuation and stop words dropped,
    English words by their stem."""
    return [stem(w) for token in jieba.lcut_for_search(text.lower()) for w in _WORD.findall(token)
            if w not in STOP_WORDS]


class _BM25(BM25Okapi):
    """Okapi BM25 with Lucene's idf, log(1 + (N - n + 0.5) / (n + 0.5)): above zero for every word.

    rank-bm25's own idf is zero for a word in exactly half the sections and negative (then floored)
    above that, so on a small index a shared word can count for nothing.
    """

    def _calc_idf(self, nd: dict[str, int]) -> None:
        self.idf = {word: math.log(1 + (self.corpus_size - n + 0.5) / (n + 0.5)) for word, n in nd.items()}


class RunbookBM25:
    """BM25 (Okapi) over runbook chunks; rebuilt by RunbookIndex whenever it (re)loads the runbooks."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.chunks = list(chunks)
        self._bm25 = _BM25([tokenize(c.text) for c in self.chunks]) if self.chunks else None

    def ranked(self, query: str, kind: str | None = None) -> list[tuple[Chunk, float]]:
        """(section, BM25 score) for every section sharing a word with the query, best first."""
        words = tokenize(query)
        if self._bm25 is None or not words:
            return []
        scores = self._bm25.get_scores(words)
        hits = [(c, float(s)) for c, s in zip(self.chunks, scores, strict=True)
                if s > 0 and (kind is None or kind in c.kinds)]
        return sorted(hits, key=lambda h: -h[1])
