"""Small text helpers shared by the surfaces."""

from __future__ import annotations


def plural(n: int, one: str, many: str | None = None) -> str:
    """`1 action`, `2 actions` (`many` for an irregular plural: `1 entry`, `2 entries`)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"
