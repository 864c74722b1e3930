"""Why the steward is degraded right now: what /healthz (503 with reasons), /metrics (steward_degraded) and the
UI banner report. Degraded, not dead: the process keeps serving what it can while any of these holds."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agent.records.store import DB_ERROR, FULL, LOCKED, READONLY, Problem, probe_dir

if TYPE_CHECKING:
    from agent.api.runtime import StewardRuntime

# Every reason code, in the order people should read them (the metric reports each, 0 or 1).
REASONS = (READONLY, FULL, LOCKED, DB_ERROR, "audit_chain_broken", "answers_incomplete", "sweep_failing",
           "backend_unavailable")


def health(rt: StewardRuntime) -> list[Problem]:
    """Each problem once per reason and detail; empty when all is well."""
    deps = rt.deps
    found: list[Problem] = [*deps.audit.problems(), *deps.approvals.problems()]
    if deps.audit.path != ":memory:" and not any(p.reason in (READONLY, FULL) for p in found):
        # A store that wrote fine last time may not now (a disk filled, a mount went read-only): look.
        probed = probe_dir(Path(deps.audit.path).parent)
        if probed is not None:
            found.append(probed)
    incomplete = deps.approvals.incomplete()
    if incomplete:
        ids = ", ".join(a.id for a in incomplete[:5]) + (" ..." if len(incomplete) > 5 else "")
        found.append(Problem("answers_incomplete", f"{len(incomplete)} answered or expired approval(s) recorded but "
                                                   f"not yet audited or carried out ({ids}); completed before the "
                                                   "next sweep"))
    if rt.sweep_error is not None:
        found.append(rt.sweep_error)
    latest = rt.latest.state.get("observed", {}) if rt.latest is not None else {}
    for reason in latest.get("degraded") or []:
        found.append(Problem("backend_unavailable", f"latest sweep: {reason}"))
    unique: dict[tuple[str, str], Problem] = {}
    for problem in found:
        unique.setdefault((problem.reason, problem.detail), problem)
    return sorted(unique.values(), key=lambda p: REASONS.index(p.reason) if p.reason in REASONS else len(REASONS))
