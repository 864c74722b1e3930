"""The import layers, checked over the source's `ast` (run by .ci/run and tests/test_layering.py).

    surfaces (server, agent.api, agent.chatops, agent.cli, agent.scheduling, agent.wiring, agent.studio)
      -> agent.graph
        -> agent.planning -> agent.detectors, agent.retrieval, agent.guardrail
           (guardrail and detectors import neither planning nor each other's callers)
          -> agent.records, agent.config
            -> core (shared value types and utilities)

Imports under `if TYPE_CHECKING:` are annotations only and are not counted. tools/ and sim/ never import a surface; tools/ imports only core (and agent.config for typing);
sim/ is imported only by the demo wiring (agent.wiring, agent.cli, agent.api.build, agent.studio),
evals and tests. The guardrail imports nothing that performs I/O.

    python tests/layering.py      # prints each violation, exits 1 if any
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "tools", "sim", "core", "evals", "server")

SURFACES = ("server", "agent.api", "agent.chatops", "agent.cli", "agent.web", "agent.scheduling", "agent.wiring",
            "agent.studio")
LOWER = ("core", "agent.config", "agent.records", "agent.assets", "agent.history")
MIDDLE = ("agent.detectors", "agent.retrieval", "agent.guardrail", "agent.planning")
DEMO_WIRING = ("agent.wiring", "agent.cli", "agent.api.build", "agent.studio")

# module prefix -> the prefixes it may import (its own package is always allowed); the longest prefix wins.
ALLOWED: dict[str, tuple[str, ...]] = {
    "core": (),
    "agent.assets": (),
    "agent.config": ("core", "agent.assets"),
    "agent.records": ("core", "agent.config"),
    "agent.guardrail": ("core", "agent.config"),
    "agent.history": ("core",),
    "agent.detectors": ("core", "agent.config", "agent.history", "tools"),
    "agent.retrieval": ("core", "agent.config", "agent.assets"),
    "agent.alerts": (*LOWER, "agent.retrieval", "tools"),  # alert intake; its route is mounted by server.py
    "agent.planning": (*LOWER, "agent.detectors", "agent.retrieval", "agent.guardrail", "tools"),
    "agent.graph": (*LOWER, *MIDDLE, "tools"),
    "agent": (*LOWER, *MIDDLE, "agent.graph", *SURFACES, "tools", "sim", "evals"),  # surfaces
    "server": (*LOWER, *MIDDLE, "agent", "tools", "sim", "evals"),
    "tools": ("core", "agent.config"),
    "sim": ("core", "tools"),
    "evals": ("core", "agent", "tools", "sim", "server"),
}
# Only the demo wiring among agent's modules may import the simulator.
SIM_IMPORTERS = (*DEMO_WIRING, "sim", "evals")
# The guardrail is a pure function, and agent.history pure computation: none of these may appear in them.
PURE = ("agent.guardrail", "agent.history")
IO_MODULES = ("sqlite3", "socket", "subprocess", "httpx", "requests", "urllib", "http", "kubernetes", "boto3",
              "chromadb", "smtplib", "shutil", "tempfile", "langgraph", "langchain_core", "langchain_openai", "os")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _rule(module: str) -> str | None:
    matches = [p for p in ALLOWED if _within(module, p)]
    return max(matches, key=len) if matches else None


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _typing_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`: annotations only, no dependency at run time."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imports_of(source: str, module: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the source that runs, relative ones resolved."""
    out: list[tuple[int, str]] = []
    tree = ast.parse(source)
    typing_only = _typing_only(tree)
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: -node.level] if node.level else []
                base = ".".join([*package, base] if base else package)
            out.append((node.lineno, base))
            out.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names
                       if _rule(f"{base}.{alias.name}") and _rule(base) != _rule(f"{base}.{alias.name}"))
    return out


def violations(source: str, module: str, where: str = "") -> list[str]:
    rule = _rule(module)
    if rule is None:
        return []
    own = module.split(".")[0] if rule in ("agent", "server") else rule
    found = []
    for line, imported in imports_of(source, module):
        label = f"{where or module}:{line}: {module} imports {imported}"
        if rule in PURE and any(_within(imported, m) for m in IO_MODULES):
            found.append(f"{label} ({rule} performs no I/O)")
            continue
        if not any(_within(imported, p) for p in PACKAGES):
            continue
        if _within(imported, "sim") and not any(_within(module, p) for p in SIM_IMPORTERS):
            found.append(f"{label} (only the demo wiring, evals and tests import sim)")
            continue
        if _within(imported, own) or any(_within(imported, p) for p in ALLOWED[rule]):
            continue
        found.append(f"{label} (layer {rule} may import only {', '.join(ALLOWED[rule]) or 'itself'})")
    return found


def check(root: Path = ROOT) -> list[str]:
    found: list[str] = []
    for package in PACKAGES:
        paths = [root / "server.py"] if package == "server" else sorted((root / package).rglob("*.py"))
        for path in paths:
            if path.exists():
                found.extend(violations(path.read_text(encoding="utf-8"), module_name(path),
                                        str(path.relative_to(root))))
    return found


def main() -> int:
    found = check()
    for v in found:
        print(v)
    print(f"import layers: {len(found)} violation(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
