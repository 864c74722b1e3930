"""Sweeping a simulated cluster the way `steward eval` does: every five minutes of scenario time, to its end."""

from __future__ import annotations

from typing import Any

from agent.graph.service import SweepService


def sweep_through(deps: Any, cluster: Any, scenario: Any, *, every_s: float = 300.0,
                  trigger: str = "test") -> SweepService:
    """One sweep every `every_s` of scenario time, from the first interval to the scenario's end."""
    service = SweepService(deps, run_prefix=scenario.name)
    t = every_s
    while t <= scenario.duration:
        cluster.advance_to(t)
        service.sweep(trigger=trigger)
        t += every_s
    return service
