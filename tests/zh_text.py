"""What in a Chinese text is still English: words outside identifiers, numbers, units and known technical terms."""

from __future__ import annotations

import re

# Technical tokens a Chinese-speaking SRE reads as they are (units, signals, products, protocol names).
TECHNICAL = {
    "GPU", "GPUs", "CPU", "SIGTERM", "SIGKILL", "NCCL", "MB", "GB", "TB", "W", "UTC", "XID", "ECC", "NVLink", "PCIe",
    "DCGM", "SM", "IO", "I/O", "GPU Steward", "Steward", "steward", "API", "SSO", "ID", "USD", "CNY", "EUR", "Slurm",
    "Kubernetes", "Prometheus", "Grafana", "SSE", "LLM", "CSV", "JSON", "EN", "L", "h", "m", "s", "d", "keep", "A100",
    "H100", "jupyter", "audit", "verify", "approvals", "approve", "deny", "policy", "model", "kubeconfig", "OK",
    "HTTP", "GET", "POST", "PUT", "CUDA",
}
# Identifiers: namespaced names, ids, paths, flags, code spans, times, URLs.
_IDENT = re.compile(r"`[^`]*`|https?://\S+|\S*[/_.@:\\=][^\s，。；：（）、]*|--?[a-z][\w-]*|apr_\w+|\b[\w-]*\d[\w-]*\b"
                    r"|\b[A-Za-z]+(?:-[A-Za-z0-9]+)+\b")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_CJK = "\u3400-\u9fff\uff00-\uffef\u3000-\u303f"
# ASCII punctuation that sits inside a Chinese sentence (next to a Chinese character), not around identifiers.
_ASCII_PUNCT = re.compile(rf"[{_CJK}][,:;!?()]|[,:;!?(][{_CJK}]")


def leftovers(text: str, allowed: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """English words and ASCII punctuation inside Chinese sentences that `text` still shows."""
    found: list[str] = []
    for line in text.splitlines():
        bare = _IDENT.sub(" ", line)
        for word in _WORD.findall(bare):
            if word not in TECHNICAL and word not in allowed and word.strip("'-") not in TECHNICAL:
                found.append(f"{word!r} in {line.strip()[:120]!r}")
        found += [f"ASCII {m.group()!r} in {line.strip()[:120]!r}" for m in _ASCII_PUNCT.finditer(line)]
    return found
