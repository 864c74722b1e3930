"""Planned pool changes read back from the guardrail's history: a forecast scale-down and its scale-up back.

Shared by the scale-up detector (agent/detectors/pools.py) and the guardrail (agent/guardrail/limit_rules.py),
so both read "which scale-down is still open" the same way (docs/forecast.md).
"""

from __future__ import annotations

from datetime import UTC, datetime

from core.actions import History, HistoryEntry

SCALE_UP_UID = "scale-down:"  # a scale-up's target_uid: this prefix and the id of the scale-down it undoes


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def scale_up_uid(scale_down: HistoryEntry) -> str:
    """The identity a scale-up back carries: the scale-down it undoes (one scale-up per scale-down)."""
    return f"{SCALE_UP_UID}{scale_down.action_id or scale_down.at.isoformat()}"


def left_at(resize: HistoryEntry) -> int | None:
    """The node count an executed resize left the pool at: what it recorded after it (a resize interrupted part way
    stops between its before and its target), else the count it asked for."""
    return resize.nodes_after if resize.nodes_after is not None else resize.target_nodes


def open_scale_down(history: History, pool: str) -> HistoryEntry | None:
    """The pool's newest executed forecast scale-down whose planned scale-up has not been done; None if none.

    A scale-down is closed by an executed resize of the pool that carries its identity (the scale-up back), and
    superseded by any later executed resize of the pool (the plan was for the pool as that scale-down left it).
    """
    resizes = sorted((e for e in history.entries if e.action == "resize_pool" and e.target == pool
                      and e.status == "executed"), key=lambda e: _utc(e.at))
    if not resizes:
        return None
    last = resizes[-1]
    after = left_at(last)
    if last.scale_up_at is None or last.scale_up_nodes is None or after is None:
        return None  # the newest resize planned nothing (or was the scale-up back itself)
    if last.nodes_before is not None and after >= last.nodes_before:
        return None  # not a scale-down
    return last
