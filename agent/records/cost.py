"""Money: price per GPU-hour per pool, waste so far, and what an action reclaims."""

from __future__ import annotations

from datetime import datetime

from core.actions import Finding


def gpu_hours(gpus: int, start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds()) / 3600.0 * gpus


def price_waste(finding: Finding, now: datetime, price_per_gpu_hour: float, currency: str) -> Finding:
    """The finding with its GPU-hours and cost wasted so far filled in."""
    hours = gpu_hours(finding.gpus, finding.since, now)
    return finding.model_copy(
        update={"waste_gpu_hours": round(hours, 3), "waste_cost": round(hours * price_per_gpu_hour, 2), "currency": currency}
    )


def money(amount: float, currency: str) -> str:
    symbol = {"USD": "$", "CNY": "¥", "EUR": "€"}.get(currency)
    return f"{symbol}{amount:,.2f}" if symbol else f"{amount:,.2f} {currency}"
