"""The runbook index: Chroma (embedded directory or a server) plus BM25, rebuilt when any runbook file changes.

`RunbookIndex.search` (hybrid: embedding and BM25 rankings fused by reciprocal rank) is what
StewardDeps.runbook_search calls; `catalog` is the short list of runbooks the planning prompt
shows; `max_level` is what a runbook lets the agent do on its own (agent/guardrail/runbook_limits.py
applies it after the guardrail).
"""

from __future__ import annotations

import contextlib
import re
import statistics
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from agent.retrieval.bm25 import RunbookBM25
from agent.retrieval.embeddings import RunbookEmbeddingFunction
from agent.retrieval.runbooks import RUNBOOKS_DIR, Chunk, Runbook, chunk_runbook, content_hash, load_runbooks

if TYPE_CHECKING:
    from agent.config.settings import Settings
    from agent.graph.deps import StewardDeps

COLLECTION = "runbooks"
EXCERPT_CHARS = 400
CANDIDATES = 200  # sections scored per query (per language for Chinese queries)
CJK = re.compile(r"[\u4e00-\u9fff]")
METHODS = ("embedding", "bm25")
# k = 60 is the constant of Cormack, Clarke & Buettcher (2009), not tuned here: large against the few top ranks, so
# no single ranking's first place decides alone and a rank's weight falls off slowly.
RRF_K = 60


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K,
        missed: Sequence[Collection[str]] = ()) -> dict[str, float]:
    """Reciprocal rank fusion, best first: an id scores the mean of 1/(k + rank) over the rankings that contain it.

    The mean over the rankings that found an id, not the usual sum (CombANZ rather than CombSUM, Fox & Shaw
    1994): BM25 cannot match a Chinese word in a section written in English, so its silence means "cannot
    tell", not "last". Where a ranking could have found an id and did not (`missed[i]` for ranking i: a section
    in the query's own script that BM25 did not match), its silence is a vote: the id counts as ranked just after
    that ranking's last. Ties keep the order ids were first seen in.
    """
    total: dict[str, float] = {}
    votes: dict[str, int] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            total[item] = total.get(item, 0.0) + 1 / (k + rank)
            votes[item] = votes.get(item, 0) + 1
    for ranking, absent in zip(rankings, missed, strict=False):
        found = set(ranking)
        for item in absent:
            if item in total and item not in found:
                total[item] += 1 / (k + len(ranking) + 1)
                votes[item] += 1
    return dict(sorted(((item, s / votes[item]) for item, s in total.items()), key=lambda pair: -pair[1]))


def _script(text: str) -> str:
    """"cjk" for text with any Chinese in it (a query with any is read as Chinese), else "latin"."""
    return "cjk" if CJK.search(text) else "latin"


def _hit(section: Mapping[str, Any], cosine: float) -> dict[str, Any]:
    """One search result from a section's metadata (Chroma's, or a Chunk's fields)."""
    return {"id": str(section["runbook_id"]), "title": section["title"], "language": section["language"],
            "section": section["section"], "excerpt": str(section["body"])[:EXCERPT_CHARS],
            "score": round(cosine, 4), "max_level": int(section["max_level"])}


def chroma_client(index_dir: Path | None = None, url: str | None = None) -> Any:
    """A Chroma server client when `url` is set, else an embedded client persisting to `index_dir`."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    quiet = ChromaSettings(anonymized_telemetry=False)
    if url:
        u = urlparse(url)
        return chromadb.HttpClient(host=u.hostname or "localhost", port=u.port or (443 if u.scheme == "https" else 8000),
                                   ssl=u.scheme == "https", settings=quiet)
    if index_dir is None:
        raise ValueError("an embedded runbook index needs a directory")
    index_dir.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(index_dir), settings=quiet)


class RunbookIndex:
    def __init__(self, directory: Path | None = None, *, index_dir: Path | None = None, chroma_url: str | None = None,
                 embedder: str = "e5-small", collection: str = COLLECTION, recheck_s: float = 60.0) -> None:
        self.directory = directory or RUNBOOKS_DIR
        self.index_dir, self.chroma_url = index_dir, chroma_url
        self.embedding = RunbookEmbeddingFunction(embedder)
        self.collection_name = collection
        self.recheck_s = recheck_s
        self._client: Any = None
        self._collection: Any = None
        self._books: list[Runbook] = []
        self._bm25 = RunbookBM25([])
        self._scripts: dict[str, set[str]] = {}  # script -> runbooks with a section in it, for BM25's silences
        self._versions: dict[tuple[str, str, str], Chunk] = {}  # (runbook, section, language) -> its first chunk
        self._hash = ""
        self._checked_at = float("-inf")
        self.last_build_s: float | None = None
        self._lock = threading.RLock()  # the server searches from several threads; build once

    # -- building -------------------------------------------------------------------------------------------------
    def ensure(self) -> bool:
        """Make the index match the files; returns True when it was (re)built."""
        with self._lock:
            return self._ensure()

    def _ensure(self) -> bool:
        self._checked_at = time.monotonic()
        digest = content_hash(self.directory, self.embedding.model)
        if self._collection is not None and digest == self._hash:
            return False
        books = load_runbooks(self.directory)  # validate before touching a working index
        if self._client is None:
            self._client = chroma_client(self.index_dir, self.chroma_url)
        collection = self._open()
        self._load(books)
        if (collection.metadata or {}).get("content_hash") == digest and collection.count() > 0:
            self._collection, self._hash = collection, digest
            return False
        self._build(books, digest)
        return True

    def rebuild(self) -> None:
        """Re-embed everything, whatever the stored hash says."""
        with self._lock:
            books = load_runbooks(self.directory)
            if self._client is None:
                self._client = chroma_client(self.index_dir, self.chroma_url)
            self._load(books)
            self._build(books, content_hash(self.directory, self.embedding.model))
            self._checked_at = time.monotonic()

    def _load(self, books: list[Runbook]) -> None:
        self._books = books
        self._bm25 = RunbookBM25([c for b in books for c in chunk_runbook(b)])
        self._scripts = {}
        self._versions = {}
        for c in self._bm25.chunks:
            self._scripts.setdefault(_script(c.text), set()).add(c.runbook_id)
            self._versions.setdefault((c.runbook_id, c.section, c.language), c)

    def count(self) -> int:
        return int(self._collection.count()) if self._collection is not None else 0

    def _open(self) -> Any:
        return self._client.get_or_create_collection(
            self.collection_name, embedding_function=self.embedding, configuration={"hnsw": {"space": "cosine"}})

    def _build(self, books: list[Runbook], digest: str) -> None:
        started = time.perf_counter()
        with contextlib.suppress(Exception):  # absent already
            self._client.delete_collection(self.collection_name)
        collection = self._client.create_collection(
            self.collection_name, embedding_function=self.embedding, configuration={"hnsw": {"space": "cosine"}},
            metadata={"content_hash": digest, "embedder": self.embedding.model})
        chunks = [c for b in books for c in chunk_runbook(b)]
        for start in range(0, len(chunks), 64):
            batch = chunks[start:start + 64]
            collection.add(
                ids=[c.chunk_id for c in batch], documents=[c.text for c in batch],
                metadatas=[{"runbook_id": c.runbook_id, "title": c.title, "language": c.language, "section": c.section,
                            "max_level": c.max_level, "kinds": ",".join(c.kinds), "body": c.body,
                            "script": _script(c.text),
                            **{f"kind_{k}": True for k in c.kinds}} for c in batch])
        self._collection, self._hash = collection, digest
        self.last_build_s = time.perf_counter() - started

    # -- reading --------------------------------------------------------------------------------------------------
    @property
    def books(self) -> list[Runbook]:
        if not self._books:
            self._books = load_runbooks(self.directory)
        return self._books

    def search(self, query: str, kind: str | None = None, k: int = 3,
               methods: Sequence[str] = METHODS) -> list[dict[str, Any]]:
        """Best section per runbook, best runbooks first: id, title, language, section, excerpt, score, max_level, rrf.

        The embedding and BM25 each rank the sections; `rrf` fuses the two rankings and each runbook
        is represented by its best fused section. `score` is that section's cosine (0 where only BM25
        found it, outside the embedding's candidates). `kind` keeps only runbooks whose `kinds` name it;
        `methods` picks one side alone (the eval compares them).
        """
        if self._collection is None or time.monotonic() - self._checked_at > self.recheck_s:
            self.ensure()
        if not query.strip() or self._collection.count() == 0:
            return []
        sections: dict[str, tuple[Mapping[str, Any], float]] = {}  # section id -> (metadata, cosine)
        rankings: list[list[str]] = []
        for method in methods:
            if method == "embedding":
                ranked = sorted(self._scored(query, kind), key=lambda t: -t[3])
                for sid, meta, cosine, _r in ranked:
                    sections.setdefault(sid, (meta, cosine))
                rankings.append([sid for sid, *_ in ranked])
            elif method == "bm25":
                chunks = [c for c, _score in self._bm25.ranked(query, kind)]
                for c in chunks:
                    if c.chunk_id not in sections:
                        sections[c.chunk_id] = (c.model_dump(), 0.0)
                rankings.append([c.chunk_id for c in chunks])
            else:
                raise ValueError(f"unknown search method {method!r}; choose from {', '.join(METHODS)}")
        # BM25's silence on a section in the query's own script is a vote (it could have matched and did not); on
        # a section in the other script it says nothing (rrf). A query with any Chinese is read as Chinese.
        # So is its silence on any section of a runbook written in the query's script too: it could have matched that
        # runbook in the query's own language and did not ("节点掉卡" against an English section the embedding likes,
        # whose runbook's Chinese sections BM25 read).
        script = _script(query)
        readable = self._scripts.get(script, set())
        missed = [set() if method != "bm25" or not ranking else
                  {sid for sid, (meta, _c) in sections.items()
                   if meta.get("script") == script or meta.get("runbook_id") in readable}
                  for method, ranking in zip(methods, rankings, strict=True)]
        hits: dict[str, dict[str, Any]] = {}
        language = "zh" if script == "cjk" else "en"
        for sid, fused in rrf(rankings, missed=missed).items():
            section, cosine = sections[sid]
            # The runbook the search ranked, in the question's language where it has that section: "NCCL hang 怎么排查"
            # matched the English words of the English version best, and a Chinese reader got English.
            own = self._versions.get((str(section["runbook_id"]), str(section["section"]), language))
            if own is not None and section["language"] != language:
                section = own.model_dump()
            hits.setdefault(str(section["runbook_id"]), {**_hit(section, cosine), "rrf": round(fused, 6)})
            if len(hits) == k:
                break
        return list(hits.values())

    def _scored(self, query: str, kind: str | None) -> list[tuple[str, dict[str, Any], float, float]]:
        """(section id, metadata, cosine, ranking score) for the embedding's candidate sections.

        A query with Chinese in it is scored against sections with and without Chinese text
        separately, each on its own scale (a z-score within the group): multilingual-e5 gives
        same-script pairs a uniform bonus that otherwise buries English-only runbooks under any
        Chinese one (docs/runbooks.md has the numbers).
        """
        kind_filter = {f"kind_{kind}": True} if kind else None
        groups = [None] if not CJK.search(query) else ["cjk", "latin"]
        out: list[tuple[str, dict[str, Any], float, float]] = []
        for script in groups:
            clauses = [c for c in (kind_filter, {"script": script} if script else None) if c]
            where = clauses[0] if len(clauses) == 1 else ({"$and": clauses} if clauses else None)
            try:
                res = self._collection.query(query_texts=[query], n_results=CANDIDATES, where=where,
                                             include=["metadatas", "distances"])
            except Exception:  # noqa: BLE001 - chroma raises when a filter matches nothing
                continue
            cosines = [1.0 - float(d) for d in res["distances"][0]]
            if not cosines:
                continue
            if script is None or len(cosines) < 3:
                ranks = cosines
            else:
                mean, std = statistics.fmean(cosines), statistics.pstdev(cosines) or 1.0
                ranks = [(c - mean) / std for c in cosines]
            out.extend(zip(res["ids"][0], res["metadatas"][0], cosines, ranks, strict=True))
        return out

    def __call__(self, query: str, kind: str | None = None, k: int = 3) -> list[dict[str, Any]]:
        return self.search(query, kind, k)

    def catalog(self, language: str = "en") -> str:
        """One line per runbook for the planning prompt, titles in `language` where a version exists."""
        by_id: dict[str, Runbook] = {}
        for b in self.books:
            if b.id not in by_id or b.language == language:
                by_id[b.id] = b
        lines = []
        for rid in sorted(by_id):
            b = by_id[rid]
            kinds = f" [{', '.join(b.kinds)}]" if b.kinds else ""
            lines.append(f"- {rid}: {b.title}{kinds} (agent may act up to level {b.max_level})")
        return "\n".join(lines)

    def max_level(self, runbook_id: str | None) -> int | None:
        levels = {b.id: b.max_level for b in self.books}
        return levels.get(runbook_id) if runbook_id else None


def open_runbook_index(settings: Settings) -> RunbookIndex:
    """The index the settings describe: embedded under data_dir/runbooks-index unless STEWARD_CHROMA_URL is set."""
    index_dir = None if settings.chroma_url else (settings.runbook_index_dir or settings.data_dir / "runbooks-index")
    return RunbookIndex(settings.runbooks_dir, index_dir=index_dir, chroma_url=settings.chroma_url,
                        embedder=settings.runbook_embedder)


def runbooks_from_settings(deps: StewardDeps, settings: Settings) -> StewardDeps:
    """Attach the configured index when STEWARD_RUNBOOKS_ENABLED is set; otherwise leave deps as they are."""
    return attach_runbooks(deps, open_runbook_index(settings)) if settings.runbooks_enabled else deps


def attach_runbooks(deps: StewardDeps, index: RunbookIndex) -> StewardDeps:
    """Give the graph the index: search for detect and the tools, the catalog for the prompt, limits for execution."""
    deps.runbook_search = index.search
    deps.runbook_catalog = index.catalog
    deps.runbook_max_level = index.max_level
    return deps
