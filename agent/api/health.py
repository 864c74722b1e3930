"""Why the steward is degraded right now: what /healthz (503 with reasons), /metrics (steward_degraded) and the
UI banner report. Degraded, not dead: the process keeps serving what it can while any of these holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.records import pg
from agent.records.store import DB_ERROR, FULL, LOCKED, READONLY, Problem, probe_dir

if TYPE_CHECKING:
    from agent.api.runtime import StewardRuntime

# Every reason code, in the order people should read them (the metric reports each, 0 or 1).
REASONS = (READONLY, FULL, LOCKED, DB_ERROR, "audit_chain_broken", "answers_incomplete", "sweep_failing",
           "backend_unavailable", "notify_failing", "planner_degraded")


def store_problems(name: str, store: Any) -> list[Problem]:
    """What a store reports (`problems()`, else its `problem` / `readonly`), each detail naming the store."""
    if store is None:
        return []
    if callable(getattr(store, "healthy", None)):
        store.healthy()  # a store whose open failed is opened again (agent/records/store.py Reopening)
    if callable(getattr(store, "problems", None)):
        found = list(store.problems())
    else:
        found = [p for p in (getattr(store, "problem", None), getattr(store, "readonly", None))
                 if isinstance(p, Problem)]
    return [p if name in p.detail else Problem(p.reason, f"{name} store: {p.detail}") for p in found]


def _file_dirs(rt: StewardRuntime, stores: Iterable[Any]) -> list[Path]:
    """The directories whose writability is probed: the data dir, and each SQLite store's own directory (never a
    path derived from a Postgres URL, nor an in-memory store)."""
    dirs: list[Path] = []
    data_dir = getattr(rt, "data_dir", None)
    if data_dir is not None and Path(data_dir).is_dir():
        dirs.append(Path(data_dir))
    for store in stores:
        location = str(getattr(store, "path", "") or "")
        if location and location != ":memory:" and not pg.is_url(location):
            parent = Path(location).parent
            if parent not in dirs:
                dirs.append(parent)
    return dirs


def latest_sweep_problems(state: Mapping[str, Any]) -> list[Problem]:
    """What the latest sweep could not do: read the cluster (backend_unavailable), deliver any owner warning it sent
    (notify_failing: no notice period starts, so nothing that needs one is ever stopped), or plan with the configured
    model (planner_degraded: the policy model planned instead)."""
    found: list[Problem] = []
    for reason in (state.get("observed") or {}).get("degraded") or []:
        found.append(Problem("backend_unavailable", f"latest sweep: {reason}"))
    warnings = [o for o in state.get("outcomes") or []
                if isinstance(o, Mapping) and o.get("action") == "notify" and o.get("status") in ("executed", "failed")]
    if warnings and not any(o.get("status") == "executed" for o in warnings):
        # Who and why stay in the audit log (this answer is public): the count says enough to page someone.
        found.append(Problem("notify_failing", f"latest sweep: none of its {len(warnings)} owner warning(s) was "
                                               "delivered (failed notify entries: `steward audit log`); no notice "
                                               "starts, so nothing is stopped until warnings go out again"))
    plan = state.get("plan") or {}
    if plan.get("degraded"):
        # The model's error stays in the sweep report (this answer is public; a gateway's error may echo its URL).
        found.append(Problem("planner_degraded", f"latest sweep: planner {plan.get('model') or '?'} did not answer; "
                                                 "the policy model planned instead (why: the sweep report)"))
    return found


def health(rt: StewardRuntime) -> list[Problem]:
    """Each problem once per reason and detail; empty when all is well."""
    deps = rt.deps
    found: list[Problem] = [*deps.audit.problems(), *deps.approvals.problems()]
    # The other stores a request writes to: a ChatOps callback or approve link, an alert, a change record. Each
    # refuses every write while its problem holds, so /healthz and steward_degraded must say so, by name.
    others: dict[str, Any] = {"changes": getattr(deps, "changes", None)}
    for name, get in getattr(rt, "stores", {}).items():
        others[name] = get()
    for name, store in others.items():
        found.extend(store_problems(name, store))
    if not any(p.reason in (READONLY, FULL) for p in found):
        # A store that wrote fine last time may not now (a disk filled, a mount went read-only): look.
        for directory in _file_dirs(rt, [deps.audit, deps.approvals, *others.values()]):
            probed = probe_dir(directory)
            if probed is not None:
                found.append(probed)
                break
    incomplete = deps.approvals.incomplete()
    if incomplete:
        ids = ", ".join(a.id for a in incomplete[:5]) + (" ..." if len(incomplete) > 5 else "")
        found.append(Problem("answers_incomplete", f"{len(incomplete)} answered or expired approval(s) recorded but "
                                                   f"not yet audited or carried out ({ids}); completed before the "
                                                   "next sweep"))
    if rt.sweep_error is not None:
        found.append(rt.sweep_error)
    found.extend(latest_sweep_problems(rt.latest.state if rt.latest is not None else {}))
    unique: dict[tuple[str, str], Problem] = {}
    for problem in found:
        unique.setdefault((problem.reason, problem.detail), problem)
    return sorted(unique.values(), key=lambda p: REASONS.index(p.reason) if p.reason in REASONS else len(REASONS))
