"""Exact scoring of a scenario run against its answer key (`truth`); no LLM judge."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from sim.scenario import Scenario

WASTE_KINDS = {"idle", "zombie", "overprovisioned", "oversized", "node_health", "stuck_pending", "idle_serving"}


class Score(BaseModel):
    detected: int = 0
    missed: int = 0
    false_positives: int = 0
    false_kills: int = 0
    reclaimed_gpu_hours: float = 0.0
    stops_without_warning: int = 0
    missed_targets: list[str] = []
    false_positive_targets: list[str] = []
    false_kill_targets: list[str] = []
    stops_before_waste: int = 0  # of the false kills: stops before the key's `since` (the waste had not begun)
    # Jobs the key says are not waste that were found idle only while their own long-tail grace ran: their owner
    # may have been warned (a needless message), but no stop was ever licensed. Reported, not a false positive.
    grace_warnings: int = 0
    grace_warning_targets: list[str] = []
    # Keyed idle or hung jobs still holding their GPUs when the run ended (never stopped, or deaf to the stop), though the run went on for
    # the detector's window and the notice after their waste began: waste nobody acted on (a stop waiting for a
    # person who never answers lands here by design). Reported, not part of `passed`.
    left_running_targets: list[str] = []

    @property
    def passed(self) -> bool:
        return self.missed == 0 and self.false_kills == 0 and self.false_positives == 0 and self.stops_without_warning == 0


def score_run(
    scenario: Scenario,
    findings: list[dict[str, Any]],
    actions: list[dict[str, Any]],
    reclaimed_gpu_hours: float,
) -> Score:
    """`findings` and `actions` in the `steward eval --json` shape.

    A false kill is an executed stop of a job the key says is not waste (`waste: none`), must not be killed, or
    whose waste had not begun yet (`at_s` before the key's `since`, both seconds from the scenario start): the job
    was still working when it was stopped. A stop is warned by a delivered warning to the same job (uid) sent before
    it and at or after the key's `since`.
    """
    found = {(f["job"], f["kind"]) for f in findings}
    grace_only = {(f["job"], f["kind"]) for f in findings if f.get("in_grace")}
    score = Score(reclaimed_gpu_hours=round(reclaimed_gpu_hours, 2))
    truth_by_target: dict[str, Any] = {}
    for t in scenario.truth:
        target = t.job or t.pool or ""
        truth_by_target[target] = t
        if t.waste == "none":
            continue
        if (target, t.waste) in found:
            score.detected += 1
        else:
            score.missed += 1
            score.missed_targets.append(f"{target} ({t.waste})")
    for target, kind in sorted(found):
        truth = truth_by_target.get(target)
        # Findings on targets the key says nothing about are not scored; node findings are scored when keyed.
        if truth is not None and kind in WASTE_KINDS and (truth.waste == "none" or truth.waste != kind):
            if kind == "overprovisioned" and truth.waste in ("idle", "zombie"):
                continue  # a job can be both; the key names its main waste
            if (target, kind) in grace_only:
                score.grace_warnings += 1
                score.grace_warning_targets.append(f"{target} ({kind})")
                continue
            score.false_positives += 1
            score.false_positive_targets.append(f"{target} ({kind})")
    stops = [a for a in actions if a["action"] in ("terminate", "force_terminate") and a["status"] == "executed"]
    for stop in stops:
        truth = truth_by_target.get(stop["job"])
        early = truth is not None and truth.since is not None and stop["at_s"] < truth.since
        if truth is not None and (truth.waste == "none" or truth.must_not_kill or early):
            score.false_kills += 1
            score.false_kill_targets.append(stop["job"])
            score.stops_before_waste += early
        # A namesake's warning (same id, another uid) does not license a stop of the job now under the id, nor does
        # one sent before the waste began (the key's `since`): it was about a stretch the job worked out of.
        began = truth.since if truth is not None and truth.since is not None else float("-inf")
        warned = any(
            a["action"] == "notify" and a["status"] == "executed" and a["job"] == stop["job"]
            and began <= a["at_s"] < stop["at_s"]
            and (not a.get("uid") or not stop.get("uid") or a["uid"] == stop["uid"])
            for a in actions
        )
        if not warned:
            score.stops_without_warning += 1
    return score
