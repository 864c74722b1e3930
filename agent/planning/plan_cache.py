"""Call the model only when there is something new to decide: the model's plan for a finding is kept,
keyed by the identity and state of that finding, and reused while neither changes.

Identity: the target, its kind of waste and the job's immutable uid. State: what happened to the target
(its audit history, pending approvals, exemptions), its scheduler state, and what the deterministic
policy model would do now, which moves when a notice period, a grace period or a back-off runs out.
Growing numbers (more idle minutes, more wasted GPU-hours) are not new: the model already answered that
finding. The model's name, the language and the policy are part of every key. A plan made while the
endpoint failed is never kept. A turn the model did not finish (it said nothing and called nothing, was cut
off, or was still calling tools when its rounds ran out) is asked again once, at the next sweep, and then kept
like an answer until the state changes: at temperature 0 the same question gets the same non-answer, and each
costs a call (the rules' floor still plans that finding). Each cluster (each audit log) has its own cache, so
two scenarios or two clusters that reuse a job name never share a plan.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent.planning.policy_model import PolicyModel
from core.actions import Finding, History, ProposedAction
from core.observation import Observation

if TYPE_CHECKING:
    from agent.graph.deps import StewardDeps


# Times one state is put to the model before an unfinished turn is kept as its answer.
UNFINISHED_TRIES = 2


@dataclass(frozen=True)
class CachedPlan:
    proposals: tuple[ProposedAction, ...]
    planned_at: datetime
    finished: bool = True  # the model finished its turn; False: kept after UNFINISHED_TRIES unfinished ones
    tries: int = 1

    @property
    def stands(self) -> bool:
        """Reused instead of asking the model again."""
        return self.finished or self.tries >= UNFINISHED_TRIES


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


class PlanCache:
    """Per-finding plans of one model, per cluster; at most `max_entries` per cluster, oldest dropped first."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._scopes: weakref.WeakKeyDictionary[Any, OrderedDict[str, CachedPlan]] = weakref.WeakKeyDictionary()

    def _scope(self, deps: StewardDeps) -> OrderedDict[str, CachedPlan]:
        return self._scopes.setdefault(deps.audit, OrderedDict())

    def keys(self, model: str, findings: list[Finding], obs: Observation, history: History,
             deps: StewardDeps) -> list[str]:
        """One key per finding (same order): its identity and state as described above."""
        jobs = obs.jobs_by_id()
        floor = PolicyModel().plan(findings, obs, history, deps).proposals
        pending = [(a.target, a.action) for a in deps.approvals.pending()]
        common = _digest([model, deps.language, deps.policy.model_dump(mode="json")])
        keys = []
        for f in findings:
            job = jobs.get(f.target) if f.target_type == "job" else None
            state = {
                "id": [f.target, f.target_type, f.kind, job.uid if job else None],
                "job_state": job.state if job else None,
                "history": [[e.action, e.status, e.finding_kind, e.target_uid, e.at.isoformat(), e.detail]
                            for e in history.entries if e.target == f.target],
                "pending": sorted(a for t, a in pending if t == f.target),
                "exempt": sorted(x.until.isoformat() for x in history.exemptions if x.target == f.target),
                "floor": [[p.action, p.key()] for p in floor if p.target == f.target],
            }
            keys.append(f"{common}:{_digest(state)}")
        return keys

    def get(self, deps: StewardDeps, key: str) -> CachedPlan | None:
        return self._scope(deps).get(key)

    def put(self, deps: StewardDeps, key: str, plan: CachedPlan) -> None:
        scope = self._scope(deps)
        scope[key] = plan
        scope.move_to_end(key)
        while len(scope) > self.max_entries:
            scope.popitem(last=False)


def answers(finding: Finding, proposals: list[ProposedAction]) -> tuple[ProposedAction, ...]:
    """The proposals that answer `finding`: about its target, for its kind (or for no kind in particular)."""
    return tuple(p for p in proposals if p.target == finding.target and p.finding_kind in (None, finding.kind))
