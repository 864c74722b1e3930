"""Next-24-hour load forecasts for one pool from its hourly history, with prediction intervals and low-load windows.

Models: Holt-Winters (statsmodels exponential smoothing; a weekly season of 168 hourly indices carries both
the daily cycle and the weekday/weekend difference), seasonal-naive (same hour yesterday, same hour last week)
and the last value. Pure computation over the numbers handed in: no I/O, no clock.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

HOUR = 3600.0
DAY_H = 24
WEEK_H = 168
HORIZON_H = 24
# Fit on at most the last 4 weeks: four weekly cycles to estimate a weekly profile, recent enough to follow
# the level shifts GPU clusters make when big jobs come and go.
TRAIN_WINDOW_H = 4 * WEEK_H
# A season is estimated only from at least two full cycles of it.
MIN_DAILY_H = 2 * DAY_H
MIN_WEEKLY_H = 2 * WEEK_H
# Intervals are 90% prediction intervals: a low-load window is predicted only where even the upper bound is low.
INTERVAL = 0.90
# A low-load hour is one among the quietest quarter of the hours in the training window.
LOW_QUANTILE = 0.25

HOLT_WINTERS = "holt-winters"
SEASONAL_NAIVE_DAY = "seasonal-naive (day)"
SEASONAL_NAIVE_WEEK = "seasonal-naive (week)"
LAST_VALUE = "last value"
MODELS = (HOLT_WINTERS, SEASONAL_NAIVE_DAY, SEASONAL_NAIVE_WEEK, LAST_VALUE)
SEASONAL_NAIVE = (SEASONAL_NAIVE_DAY, SEASONAL_NAIVE_WEEK)


class ForecastError(ValueError):
    """History that cannot be forecast from; the message says what is missing."""


@dataclass(frozen=True)
class Forecast:
    """The next `len(mean)` hours after the history's last hour."""

    model: str
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    season_h: int | None = None  # the seasonal period used, in hours (None: not seasonal)


def min_history_h(model: str) -> int:
    """Hours of history a model needs (two cycles of its season; two days for the others' intervals)."""
    if model not in MODELS:
        raise ForecastError(f"unknown forecast model {model!r}; known: {', '.join(MODELS)}")
    return MIN_WEEKLY_H if model == SEASONAL_NAIVE_WEEK else MIN_DAILY_H


def _tails() -> tuple[float, float]:
    return (1.0 - INTERVAL) / 2.0, 1.0 - (1.0 - INTERVAL) / 2.0


def seasonal_naive(history: np.ndarray, period: int, horizon: int = HORIZON_H) -> Forecast:
    """The value one period ago; intervals from the history's own errors at that lag."""
    n = len(history)
    mean = np.array([history[n - period + (k % period)] for k in range(horizon)], dtype=float)
    errors = history[period:] - history[:-period]
    lo, hi = np.quantile(errors, _tails())
    name = SEASONAL_NAIVE_DAY if period == DAY_H else SEASONAL_NAIVE_WEEK
    return Forecast(name, mean, mean + lo, mean + hi, season_h=period)


def last_value(history: np.ndarray, horizon: int = HORIZON_H) -> Forecast:
    """The last hour's value; intervals from the history's own h-hour changes."""
    mean = np.full(horizon, float(history[-1]))
    lo = np.empty(horizon)
    hi = np.empty(horizon)
    for h in range(1, horizon + 1):
        lo[h - 1], hi[h - 1] = np.quantile(history[h:] - history[:-h], _tails())
    return Forecast(LAST_VALUE, mean, mean + lo, mean + hi)


def holt_winters(history: np.ndarray, horizon: int = HORIZON_H, seed: int = 0) -> Forecast:
    """Additive Holt-Winters, weekly season when two weeks are there, else daily; simulated intervals."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    period = WEEK_H if len(history) >= MIN_WEEKLY_H else DAY_H
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter; a poor fit shows in the backtest's numbers
        fit = ExponentialSmoothing(history, seasonal="add", seasonal_periods=period,
                                   initialization_method="heuristic").fit(use_brute=False)
        mean = np.asarray(fit.forecast(horizon), dtype=float)
        paths = np.asarray(fit.simulate(horizon, repetitions=500, error="add", random_state=seed), dtype=float)
    lo, hi = np.quantile(paths, _tails(), axis=1)
    return Forecast(HOLT_WINTERS, mean, lo, hi, season_h=period)


def forecast(model: str, history: np.ndarray, horizon: int = HORIZON_H, capacity: float | None = None) -> Forecast:
    """Forecast the next hours with one model from hourly history (oldest first), clipped to [0, capacity]."""
    history = np.asarray(history, dtype=float)
    need = min_history_h(model)
    if len(history) < need:
        raise ForecastError(f"{model} needs {need} hours of history ({need // DAY_H} days); got {len(history)}")
    if not np.all(np.isfinite(history)):
        raise ForecastError("history has gaps (NaN or infinite values); fill or drop them first")
    window = history[-TRAIN_WINDOW_H:]
    if model == HOLT_WINTERS:
        f = holt_winters(window, horizon)
    elif model == LAST_VALUE:
        f = last_value(window, horizon)
    else:
        f = seasonal_naive(window, DAY_H if model == SEASONAL_NAIVE_DAY else WEEK_H, horizon)
    top = math.inf if capacity is None else float(capacity)
    return Forecast(f.model, np.clip(f.mean, 0, top), np.clip(f.lower, 0, top), np.clip(f.upper, 0, top), f.season_h)


def low_threshold(history: np.ndarray) -> float:
    """The load under which an hour counts as low: the quietest quarter of the training window's hours."""
    return float(np.quantile(np.asarray(history, dtype=float)[-TRAIN_WINDOW_H:], LOW_QUANTILE))


def predicted_low(f: Forecast, threshold: float) -> np.ndarray:
    """Hours predicted low: even the interval's upper bound is at or under the threshold."""
    return np.asarray(f.upper <= threshold)


def windows(mask: np.ndarray) -> list[tuple[int, int]]:
    """Runs of True as (first hour, hour after the last), hours counted from the forecast start."""
    out: list[tuple[int, int]] = []
    start: int | None = None
    for i, low in enumerate([bool(x) for x in mask]):
        if low and start is None:
            start = i
        elif not low and start is not None:
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, len(mask)))
    return out


@dataclass(frozen=True)
class BacktestScore:
    """One model over a rolling-origin backtest."""

    name: str
    mae: float
    coverage: float  # share of actual hours inside the interval
    window_precision: float | None  # share of predicted-low hours that were low; None: none predicted
    predicted_low_hours: int = 0
    low_hours: int = 0  # hours that were actually low
    origins: int = 0
    above_upper: float | None = None  # share of scored hours whose actual load was over the interval's upper bound

    @property
    def window_recall(self) -> float | None:
        if not self.low_hours or self.window_precision is None:
            return None
        return self.window_precision * self.predicted_low_hours / self.low_hours


def beats_seasonal_naive(candidate: BacktestScore, baselines: list[BacktestScore]) -> bool:
    """The default's test: lower MAE than every seasonal-naive baseline and low windows at least as precise.

    Coverage is not a separate test: windows are read from the upper bound, so intervals that are too
    narrow show up as imprecise windows, and intervals that are too wide as none at all.
    """
    if not baselines:
        return False
    if any(candidate.mae >= b.mae for b in baselines):
        return False
    if candidate.window_precision is None:
        return all(b.window_precision is None for b in baselines)
    return all(candidate.window_precision >= (b.window_precision or 0.0) for b in baselines)


def pick_default(scores: list[BacktestScore], candidate: str = HOLT_WINTERS) -> str:
    """The candidate if it beats seasonal-naive; otherwise the seasonal-naive baseline with the lowest MAE."""
    by_name = {s.name: s for s in scores}
    baselines = [s for s in scores if s.name in SEASONAL_NAIVE]
    if not baselines:
        raise ForecastError("no seasonal-naive baseline in the backtest: nothing to compare the forecaster with")
    if candidate in by_name and beats_seasonal_naive(by_name[candidate], baselines):
        return candidate
    return min(baselines, key=lambda s: s.mae).name


def backtest_models(hours: int) -> tuple[list[str], int]:
    """The models a series of `hours` is long enough for, and the first origin (hours of history before it)."""
    if hours >= MIN_WEEKLY_H + HORIZON_H:
        return list(MODELS), MIN_WEEKLY_H
    if hours >= MIN_DAILY_H + HORIZON_H:
        return [m for m in MODELS if m != SEASONAL_NAIVE_WEEK], MIN_DAILY_H
    raise ForecastError(f"the series covers {hours} hours; a backtest needs at least {MIN_DAILY_H + HORIZON_H} "
                        f"({MIN_DAILY_H // DAY_H} days of history and one day to score; "
                        f"{(MIN_WEEKLY_H + HORIZON_H) // DAY_H} days for the weekly models)")


def backtest_origins(hours: int, first: int, step: int = DAY_H, filled: np.ndarray | None = None) -> list[int]:
    """The origins, counted back from the last one (its 24 h are the series' last), `step` hours apart, none
    with under `first` hours before it.

    The forecaster is checked from the hour of day it will forecast from: a live forecast starts where the
    history ends, so with one origin a day every origin shares that hour. `filled` marks hours with no sample
    (filled in by the caller): an origin whose history ends in one is left out, since its filled hours were
    drawn toward values after the origin and a pool's history with gaps is not forecast at all.
    """
    origins = list(range(hours - HORIZON_H, first - 1, -step))[::-1]
    if filled is not None:
        origins = [o for o in origins if not filled[o - 1]]
    return origins


def rolling_backtest(y: np.ndarray, capacity: np.ndarray | None = None, models: list[str] | None = None,
                     step: int = DAY_H, filled: np.ndarray | None = None) -> tuple[int, int, list[BacktestScore]]:
    """Rolling origin, one a day at the hour the history ends (`step` 1: every hour): each model forecasts the
    next 24 h from the hours before the origin only.

    Returns the least history before an origin (hours), the number of origins and one score per model.
    """
    y = np.asarray(y, dtype=float)
    usable, first = backtest_models(len(y))
    names = [m for m in (models or usable) if m in usable]
    origins = backtest_origins(len(y), first, step, filled)
    if not origins:
        raise ForecastError("every origin's history ends in an hour with no sample: nothing to score")
    abs_err: dict[str, list[float]] = {m: [] for m in names}
    inside = {m: 0 for m in names}
    above = {m: 0 for m in names}
    predicted = {m: 0 for m in names}
    right = {m: 0 for m in names}
    low_hours = 0
    for o in origins:
        history, actual = y[:o], y[o:o + HORIZON_H]
        cap = float(capacity[o - 1]) if capacity is not None else None
        threshold = low_threshold(history)
        low = actual <= threshold
        low_hours += int(low.sum())
        for m in names:
            f = forecast(m, history, HORIZON_H, cap)
            abs_err[m].extend(np.abs(f.mean - actual).tolist())
            inside[m] += int(((actual >= f.lower) & (actual <= f.upper)).sum())
            above[m] += int((actual > f.upper).sum())
            flagged = predicted_low(f, threshold)
            predicted[m] += int(flagged.sum())
            right[m] += int((flagged & low).sum())
    hours = len(origins) * HORIZON_H
    scores = [BacktestScore(name=m, mae=float(np.mean(abs_err[m])), coverage=inside[m] / hours,
                            window_precision=right[m] / predicted[m] if predicted[m] else None,
                            predicted_low_hours=predicted[m], low_hours=low_hours, origins=len(origins),
                            above_upper=above[m] / hours)
              for m in names]
    return first, len(origins), scores


# A pool is forecast only after the forecaster was checked against seasonal-naive on its own past: two days to
# fit and one to score.
MIN_FORECAST_H = MIN_DAILY_H + DAY_H


@dataclass(frozen=True)
class LowWindowPlan:
    """A pool's forecast read for planning: the model its own past picked, the low windows, the backtest's risk."""

    model: str
    first_hour: float  # epoch seconds of the forecast's first hour (the hour after the history's last)
    windows: tuple[tuple[float, float], ...]  # (start, end) epoch seconds of each predicted low-load window
    threshold: float  # the low-load line, allocated GPUs
    upper: tuple[float, ...]  # the interval's upper bound, hour by hour
    risk: float  # share of backtest hours whose load went over the chosen model's upper bound
    origins: int  # backtest origins behind `risk`
    history_hours: int

    def window_at(self, at: float) -> tuple[float, float] | None:
        """The predicted low-load window `at` (epoch seconds) falls in, or None."""
        return next(((a, b) for a, b in self.windows if a <= at < b), None)


def plan_low_windows(values: tuple[float, ...], first_hour: float, capacity: float | None) -> LowWindowPlan:
    """Pick the pool's model with the default-model test on its own past, forecast 24 h, read the low windows.

    `values` are the pool's allocated GPUs per hour, oldest first; `first_hour` the epoch second the forecast
    starts at (the end of the history). ForecastError when the history is too short or has gaps.
    """
    y = np.asarray(values, dtype=float)
    if len(y) < MIN_FORECAST_H:
        raise ForecastError(f"{len(y)} h of load history; forecasting a pool takes {MIN_FORECAST_H} h (2 days to "
                            "fit, 1 to check the forecaster against seasonal-naive)")
    if not np.all(np.isfinite(y)):
        raise ForecastError("the load history has gaps (NaN or infinite values)")
    caps = None if capacity is None else np.full(len(y), float(capacity))
    _, origins, scores = rolling_backtest(y, caps)
    model = pick_default(scores)
    chosen = next(s for s in scores if s.name == model)
    f = forecast(model, y, HORIZON_H, capacity)
    threshold = low_threshold(y)
    spans = tuple((first_hour + a * HOUR, first_hour + b * HOUR) for a, b in windows(predicted_low(f, threshold)))
    return LowWindowPlan(model=model, first_hour=first_hour, windows=spans, threshold=threshold,
                         upper=tuple(float(u) for u in f.upper), risk=float(chosen.above_upper or 0.0),
                         origins=origins, history_hours=len(y))


@lru_cache(maxsize=64)
def cached_low_windows(values: tuple[float, ...], first_hour: float, capacity: float | None) -> LowWindowPlan:
    """plan_low_windows, computed once per history: a sweep every few minutes sees the same past for an hour."""
    return plan_low_windows(values, first_hour, capacity)
