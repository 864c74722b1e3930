"""Rolling-origin backtest of the load forecasters against seasonal-naive: MAE, interval coverage, window precision.

Every day at the hour the series ends (where a live forecast would start), each model forecasts the next 24 hours
from the hours before that origin only (at most the last 4 weeks) and is scored on what followed. One hour of day
is one draw, so the same scores over origins at every hour of the day are reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from agent.history.forecast import (
    DAY_H,
    HORIZON_H,
    INTERVAL,
    BacktestScore,
    backtest_models,
    backtest_origins,
    pick_default,
    rolling_backtest,
)
from evals.series import HourlySeries


@dataclass
class BacktestResult:
    series: HourlySeries
    first_origin_h: int
    origins: int
    scores: list[BacktestScore]
    default: str
    skipped: int = 0  # daily origins left out: their history ends in an hour with no sample
    all_hours: BacktestResult | None = None  # the same over origins at every hour of the day


def models_for(hours: int) -> tuple[list[str], int]:
    """The models the series is long enough for, and the first origin (hours of history before it)."""
    return backtest_models(hours)


def backtest(series: HourlySeries, models: list[str] | None = None, all_hours: bool = False,
             step: int = DAY_H) -> BacktestResult:
    """The daily backtest at the hour the series ends; `all_hours` adds the same over every hour's origins."""
    first, origins, scores = rolling_backtest(series.values, series.capacity, models, step, series.filled)
    skipped = len(backtest_origins(series.hours, first, step)) - origins
    extra = backtest(series, models, step=1) if all_hours and step != 1 else None
    return BacktestResult(series=series, first_origin_h=first, origins=origins, scores=scores,
                          default=pick_default(scores), skipped=skipped, all_hours=extra)


def origin_hour(result: BacktestResult) -> int:
    """The UTC hour of day of the daily origins: the hour the series' last day starts, a live forecast's."""
    s = result.series
    return (s.start + timedelta(hours=s.hours - HORIZON_H)).hour


def rows(result: BacktestResult) -> list[dict]:
    return [{"name": s.name, "mae": round(s.mae, 3), "coverage": round(s.coverage, 4),
             "window_precision": None if s.window_precision is None else round(s.window_precision, 4)}
            for s in result.scores]


def to_json(result: BacktestResult) -> dict:
    doc: dict = {"rows": rows(result), "default": result.default}
    if result.all_hours is not None:
        doc["all_hours"] = {"origins": result.all_hours.origins, "rows": rows(result.all_hours),
                            "default": result.all_hours.default}
    return doc


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _scores(result: BacktestResult) -> None:
    header = (f"{'model':<24} {'MAE':>8} {'coverage':>9} {'window precision':>17} {'low hours predicted':>20} "
              f"{'window recall':>14}")
    print(header)
    print("-" * len(header))
    for sc in result.scores:
        mark = " *" if sc.name == result.default else ""
        print(f"{sc.name + mark:<24} {sc.mae:>8.2f} {sc.coverage:>9.1%} {_pct(sc.window_precision):>17} "
              f"{sc.predicted_low_hours:>20} {_pct(sc.window_recall):>14}")


def _left_out(result: BacktestResult) -> str:
    return (f"; {result.skipped} left out (history ending in an empty hour)" if result.skipped else "")


def print_table(result: BacktestResult) -> None:
    s = result.series
    cap = f", capacity {s.columns['capacity']!r}" if s.columns["capacity"] else ""
    print(f"Load forecast backtest on {s.path}: column {s.columns['value']!r}{cap}, {s.hours} hours from "
          f"{s.start:%Y-%m-%d %H:00} UTC ({s.filled_hours} empty hours interpolated)")
    print(f"Rolling origin: {result.origins} origins, one a day at {origin_hour(result):02d}:00 UTC (where the "
          f"series ends, as a live forecast), after at least {result.first_origin_h // DAY_H} days{_left_out(result)};"
          f" each forecasts the next {HORIZON_H} h from at most the last 4 weeks before it.")
    _scores(result)
    if result.all_hours is not None:
        every = result.all_hours
        print(f"The same over origins at every hour of the day ({every.origins} origins, all 24 hours of day "
              f"pooled{_left_out(every)}); one hour of day is one draw:")
        _scores(every)
    print(f"* default. Coverage of the {INTERVAL:.0%} prediction interval; a low hour is one among the quietest "
          "quarter of the hours before its origin, and an hour is predicted low when the interval's upper bound is.")
    print("The forecaster is the default only with a lower MAE than every seasonal-naive baseline and low windows "
          "at least as precise; otherwise the best seasonal-naive one is.")
