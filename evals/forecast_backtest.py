"""Rolling-origin backtest of the load forecasters against seasonal-naive: MAE, interval coverage, window precision.

Every day at the same hour, each model forecasts the next 24 hours from the hours before that origin only
(at most the last 4 weeks) and is scored on what followed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.history.forecast import (
    DAY_H,
    HORIZON_H,
    INTERVAL,
    MIN_DAILY_H,
    MIN_WEEKLY_H,
    MODELS,
    SEASONAL_NAIVE_WEEK,
    BacktestScore,
    ForecastError,
    forecast,
    low_threshold,
    pick_default,
    predicted_low,
)
from evals.series import HourlySeries


@dataclass
class BacktestResult:
    series: HourlySeries
    first_origin_h: int
    origins: int
    scores: list[BacktestScore]
    default: str


def models_for(hours: int) -> tuple[list[str], int]:
    """The models the series is long enough for, and the first origin (hours of history before it)."""
    if hours >= MIN_WEEKLY_H + HORIZON_H:
        return list(MODELS), MIN_WEEKLY_H
    if hours >= MIN_DAILY_H + HORIZON_H:
        return [m for m in MODELS if m != SEASONAL_NAIVE_WEEK], MIN_DAILY_H
    raise ForecastError(f"the series covers {hours} hours; a backtest needs at least {MIN_DAILY_H + HORIZON_H} "
                        f"({MIN_DAILY_H // DAY_H} days of history and one day to score; "
                        f"{(MIN_WEEKLY_H + HORIZON_H) // DAY_H} days for the weekly models)")


def backtest(series: HourlySeries, models: list[str] | None = None) -> BacktestResult:
    y = series.values
    usable, first = models_for(len(y))
    names = [m for m in (models or usable) if m in usable]
    origins = list(range(first, len(y) - HORIZON_H + 1, DAY_H))
    abs_err: dict[str, list[float]] = {m: [] for m in names}
    inside = {m: 0 for m in names}
    predicted = {m: 0 for m in names}
    right = {m: 0 for m in names}
    low_hours = 0
    for o in origins:
        history, actual = y[:o], y[o:o + HORIZON_H]
        capacity = float(series.capacity[o - 1]) if series.capacity is not None else None
        threshold = low_threshold(history)
        low = actual <= threshold
        low_hours += int(low.sum())
        for m in names:
            f = forecast(m, history, HORIZON_H, capacity)
            abs_err[m].extend(np.abs(f.mean - actual).tolist())
            inside[m] += int(((actual >= f.lower) & (actual <= f.upper)).sum())
            flagged = predicted_low(f, threshold)
            predicted[m] += int(flagged.sum())
            right[m] += int((flagged & low).sum())
    hours = len(origins) * HORIZON_H
    scores = [BacktestScore(name=m, mae=float(np.mean(abs_err[m])), coverage=inside[m] / hours,
                            window_precision=right[m] / predicted[m] if predicted[m] else None,
                            predicted_low_hours=predicted[m], low_hours=low_hours, origins=len(origins))
              for m in names]
    return BacktestResult(series=series, first_origin_h=first, origins=len(origins), scores=scores,
                          default=pick_default(scores))


def rows(result: BacktestResult) -> list[dict]:
    return [{"name": s.name, "mae": round(s.mae, 3), "coverage": round(s.coverage, 4),
             "window_precision": None if s.window_precision is None else round(s.window_precision, 4)}
            for s in result.scores]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def print_table(result: BacktestResult) -> None:
    s = result.series
    cap = f", capacity {s.columns['capacity']!r}" if s.columns["capacity"] else ""
    print(f"Load forecast backtest on {s.path}: column {s.columns['value']!r}{cap}, {s.hours} hours from "
          f"{s.start:%Y-%m-%d %H:00} UTC ({s.filled_hours} empty hours interpolated)")
    print(f"Rolling origin: {result.origins} origins, one a day, the first after {result.first_origin_h // DAY_H} days;"
          f" each forecasts the next {HORIZON_H} h from at most the last 4 weeks before it.")
    header = (f"{'model':<24} {'MAE':>8} {'coverage':>9} {'window precision':>17} {'low hours predicted':>20} "
              f"{'window recall':>14}")
    print(header)
    print("-" * len(header))
    for sc in result.scores:
        mark = " *" if sc.name == result.default else ""
        print(f"{sc.name + mark:<24} {sc.mae:>8.2f} {sc.coverage:>9.1%} {_pct(sc.window_precision):>17} "
              f"{sc.predicted_low_hours:>20} {_pct(sc.window_recall):>14}")
    print(f"* default. Coverage of the {INTERVAL:.0%} prediction interval; a low hour is one among the quietest "
          "quarter of the hours before its origin, and an hour is predicted low when the interval's upper bound is.")
    print("The forecaster is the default only with a lower MAE than every seasonal-naive baseline and low windows "
          "at least as precise; otherwise the best seasonal-naive one is.")
