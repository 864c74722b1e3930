"""Load forecasting: models, low windows, the beats-seasonal-naive rule, the rolling backtest and its CLI."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from agent.cli.main import main
from agent.history.forecast import (
    HOLT_WINTERS,
    LAST_VALUE,
    SEASONAL_NAIVE_DAY,
    SEASONAL_NAIVE_WEEK,
    BacktestScore,
    ForecastError,
    beats_seasonal_naive,
    forecast,
    pick_default,
    windows,
)
from evals.forecast_backtest import backtest
from evals.series import HourlySeries, SeriesError, load_hourly

START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday


def weekly_load(hours: int, noise: float = 0.0, shift: float = 0.0, seed: int = 0) -> np.ndarray:
    """GPUs in use: a daily cycle, quieter weekends, a level shift half-way, optional noise."""
    t = np.arange(hours)
    day = 40 + 25 * np.sin(2 * np.pi * (t % 24) / 24)
    weekend = np.where((t // 24) % 7 >= 5, -20.0, 0.0)
    level = np.where(t >= hours // 2, shift, 0.0)
    return np.clip(day + weekend + level + np.random.default_rng(seed).normal(0, noise, hours), 0, None)


def hourly(values: np.ndarray) -> HourlySeries:
    return HourlySeries(path="synthetic", start=START, values=values, capacity=None, filled_hours=0,
                        columns={"time": "", "value": "gpus", "capacity": ""}, rows=len(values))


def score(name: str, mae: float, precision: float | None) -> BacktestScore:
    return BacktestScore(name=name, mae=mae, coverage=0.9, window_precision=precision, predicted_low_hours=10,
                         low_hours=20, origins=5)


def test_the_forecaster_is_the_default_only_when_it_beats_every_seasonal_naive():
    day, week = score(SEASONAL_NAIVE_DAY, 10.0, 0.8), score(SEASONAL_NAIVE_WEEK, 12.0, 0.7)
    assert pick_default([score(HOLT_WINTERS, 8.0, 0.9), day, week]) == HOLT_WINTERS
    # Higher MAE than one baseline: the best seasonal-naive is the default.
    assert pick_default([score(HOLT_WINTERS, 11.0, 0.9), day, week]) == SEASONAL_NAIVE_DAY
    # Lower MAE but less precise windows: not the default either.
    assert pick_default([score(HOLT_WINTERS, 8.0, 0.75), day, week]) == SEASONAL_NAIVE_DAY
    # No windows at all cannot beat baselines that predicted precise ones...
    assert not beats_seasonal_naive(score(HOLT_WINTERS, 8.0, None), [day, week])
    # ...and any precision beats baselines that predicted none.
    assert beats_seasonal_naive(score(HOLT_WINTERS, 8.0, 0.5), [score(SEASONAL_NAIVE_DAY, 9.0, None)])
    # The last value is a reference, not a baseline the rule compares with.
    assert pick_default([score(HOLT_WINTERS, 8.0, 0.9), day, week, score(LAST_VALUE, 1.0, 1.0)]) == HOLT_WINTERS
    with pytest.raises(ForecastError, match="no seasonal-naive baseline"):
        pick_default([score(HOLT_WINTERS, 8.0, 0.9)])


def test_a_noisy_weekly_pool_with_a_level_shift_is_forecast_better_than_seasonal_naive():
    result = backtest(hourly(weekly_load(24 * 17, noise=3.0, shift=15.0)))
    by = {s.name: s for s in result.scores}
    assert result.origins == 3
    assert by[HOLT_WINTERS].mae < min(by[SEASONAL_NAIVE_DAY].mae, by[SEASONAL_NAIVE_WEEK].mae)
    assert result.default == HOLT_WINTERS


def test_where_seasonal_naive_is_exact_it_stays_the_default():
    # A pool that repeats every week to the GPU: same hour last week is never wrong, nothing can beat it.
    result = backtest(hourly(weekly_load(24 * 16)))
    assert {s.name: s for s in result.scores}[SEASONAL_NAIVE_WEEK].mae == 0.0
    assert result.default == SEASONAL_NAIVE_WEEK


def test_forecast_intervals_hold_the_mean_and_capacity_caps_them():
    history = weekly_load(24 * 15, noise=2.0)
    f = forecast(HOLT_WINTERS, history, capacity=60.0)
    assert f.season_h == 168 and len(f.mean) == 24
    assert np.all(f.lower <= f.mean) and np.all(f.mean <= f.upper) and np.all(f.upper <= 60.0)
    assert forecast(HOLT_WINTERS, history[: 24 * 3]).season_h == 24  # under two weeks: daily season only
    with pytest.raises(ForecastError, match="needs 48 hours"):
        forecast(HOLT_WINTERS, history[:30])
    with pytest.raises(ForecastError, match="unknown forecast model"):
        forecast("prophet", history)


def test_windows_are_runs_of_low_hours():
    assert windows(np.array([False, True, True, False, True])) == [(1, 3), (4, 5)]
    assert windows(np.array([False, False])) == []


def write_series(path: Path, values: np.ndarray, every_s: int = 1800, iso: bool = True, capacity: float = 64) -> Path:
    t0 = START.timestamp()
    lines = ["time,allocated_gpus,capacity"]
    for i, v in enumerate(np.repeat(values, 3600 // every_s)):
        t = t0 + i * every_s
        stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S") if iso else f"{t:.0f}"
        lines.append(f"{stamp},{v:.2f},{capacity:g}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_hourly_averages_per_hour_and_fills_gaps(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("timestamp,used,total\n0,2,8\n1800,4,8\n7200,10,8\n")
    s = load_hourly(path)
    assert s.columns == {"time": "timestamp", "value": "used", "capacity": "total"}
    assert s.values.tolist() == [3.0, 6.5, 10.0] and s.filled_hours == 1
    assert s.capacity is not None and s.capacity.tolist() == [8.0, 8.0, 8.0]
    iso = load_hourly(write_series(tmp_path / "iso.csv", np.array([1.0, 2.0, 3.0])))
    assert iso.values.tolist() == [1.0, 2.0, 3.0] and iso.start == START


def test_a_bare_gpus_column_is_the_capacity_beside_a_load_and_the_load_alone(tmp_path):
    """docs/forecast.md's SERIES (ts,gpus_used,gpus) was read with its capacity as the load: 32 of 32 GPUs busy
    every hour, every hour 'low'."""
    beside = tmp_path / "beside.csv"
    beside.write_text("ts,gpus_used,gpus\n0,10,32\n3600,20,32\n")
    s = load_hourly(beside)
    assert s.columns == {"time": "ts", "value": "gpus_used", "capacity": "gpus"}
    assert s.values.tolist() == [10.0, 20.0] and s.capacity is not None and s.capacity.tolist() == [32.0, 32.0]
    alone = tmp_path / "alone.csv"
    alone.write_text("time,gpus\n0,5\n")
    assert load_hourly(alone).columns == {"time": "time", "value": "gpus", "capacity": ""}


@pytest.mark.parametrize(("body", "args", "message"), [
    ("when,x\n0,1\n", {}, "cannot tell which column is the time column"),
    ("time,load\n0,1\n", {"value_col": "gpus"}, "no column 'gpus' for the load column"),
    ("time,load\nyesterday,1\n", {}, "row 2, column 'time'"),
    ("time,load\n0,-3\n", {}, "row 2, column 'load'"),
    ("time,load\n", {}, "no data rows"),
])
def test_bad_series_are_refused_naming_what_is_wrong(tmp_path, body, args, message):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(SeriesError, match=message):
        load_hourly(path, **args)


def test_cli_backtest_json_shape(tmp_path, capsys):
    path = write_series(tmp_path / "pool.csv", weekly_load(24 * 16, noise=3.0, shift=10.0))
    assert main(["forecast", "backtest", str(path), "--value-col", "allocated_gpus", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"rows", "default", "all_hours"}
    names = [r["name"] for r in doc["rows"]]
    assert {HOLT_WINTERS, SEASONAL_NAIVE_DAY, SEASONAL_NAIVE_WEEK} <= set(names) and doc["default"] in names
    # The same scores over origins at every hour of day: 16 days, origins from hour 336 to 360.
    assert doc["all_hours"]["origins"] == 25 and [r["name"] for r in doc["all_hours"]["rows"]] == names
    for row in doc["rows"] + doc["all_hours"]["rows"]:
        assert set(row) == {"name", "mae", "coverage", "window_precision"}
        assert 0.0 <= row["coverage"] <= 1.0
    short = write_series(tmp_path / "short.csv", weekly_load(40))
    assert main(["forecast", "backtest", str(short)]) == 2
    assert "needs at least 72" in capsys.readouterr().err


def test_cli_forecast_of_the_demo_pools_windows_from_history_and_says_why_not_without(capsys, monkeypatch):
    assert main(["forecast", "--json"]) == 0
    demo = {p["pool"]: p for p in json.loads(capsys.readouterr().out)["pools"]}
    assert set(demo) == {"a100-ondemand", "h100-reserved"}
    # The on-demand pool's three weeks of history (the scenario's `history:` extension) predict its quiet evening,
    # the window the demo sweep's scale-down is proposed in.
    ondemand = demo["a100-ondemand"]
    assert ondemand["history_hours"] == 21 * 24 and ondemand["model"] is not None
    assert ondemand["windows"] == [{"start": "2026-11-02T17:00:00+00:00", "end": "2026-11-02T22:00:00+00:00"}]
    reserved = demo["h100-reserved"]
    assert reserved["model"] is None and reserved["needs_hours"] == 72 and reserved["history_hours"] < 72
    assert main(["forecast", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "历史不足 72 小时" in out and "低负载窗口：11-02 17:00 至 11-02 22:00 UTC（5 小时）" in out
    # A team in Beijing reads the same window in its own hours (STEWARD_DISPLAY_TZ), the zone named.
    monkeypatch.setenv("STEWARD_DISPLAY_TZ", "Asia/Shanghai")
    assert main(["forecast", "--lang", "zh"]) == 0
    assert "低负载窗口：11-03 01:00 至 11-03 06:00 Asia/Shanghai（5 小时）" in capsys.readouterr().out


def test_cli_forecast_of_a_recorded_series(tmp_path, capsys):
    path = write_series(tmp_path / "pool.csv", weekly_load(24 * 4, noise=1.0), iso=False)
    assert main(["forecast", "--history", str(path), "--json"]) == 0
    (pool,) = json.loads(capsys.readouterr().out)["pools"]
    assert pool["model"] in (HOLT_WINTERS, SEASONAL_NAIVE_DAY) and len(pool["hours"]) == 24
    assert pool["hours"][0]["at"].startswith("2026-01-09T00:00")
    assert all(h["lower"] <= h["mean"] <= h["upper"] <= 64 for h in pool["hours"])
    assert all(w["start"] < w["end"] for w in pool["windows"])


def test_times_in_milliseconds_are_refused(tmp_path):
    path = tmp_path / "ms.csv"
    path.write_text("time,load\n1700000000000,1\n1700003600000,2\n")
    with pytest.raises(SeriesError, match="milliseconds"):
        load_hourly(path)


def test_a_span_of_decades_is_refused(tmp_path):
    path = tmp_path / "span.csv"
    path.write_text("time,load\n0,1\n1700000000,2\n")
    with pytest.raises(SeriesError, match="spans 54 years"):
        load_hourly(path)


def test_cli_forecast_text_in_chinese(tmp_path, capsys):
    path = write_series(tmp_path / "pool.csv", weekly_load(24 * 4, noise=1.0))
    assert main(["forecast", "--history", str(path), "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "资源池 pool.csv：容量 64 块 GPU" in out and "模型：" in out and "01-09 00:00 UTC" in out


def test_a_pool_quiet_half_the_day_gets_a_window_its_kept_nodes_can_carry():
    """Quiet 19:00-07:00 (4 GPUs with noise), busy by day (24-30): the quietest quarter of hours sits inside the
    night's own noise, so no hour's upper bound is under it and the quantile line finds no window. A scale-down
    that keeps 16 GPUs (less the reserve) is safe while even the upper bound fits in them: the night is a window,
    and the scale-up is planned a lead before the morning."""
    from datetime import UTC, datetime

    import numpy as np

    from agent.config.policy import Policy
    from agent.detectors.pools import OversizedPoolDetector
    from core.cluster import PoolInfo

    rng = np.random.default_rng(7)
    end = datetime(2026, 11, 4, 19, 0, tzinfo=UTC)  # the history's last hour ends at 19:00
    hours = 21 * 24
    load = [float(4 + rng.integers(0, 3)) if (h % 24 >= 19 or h % 24 < 7) else float(24 + rng.integers(0, 7))
            for h in range(hours)]  # hour 0 is 19:00 21 days back
    load = load[19:] + load[:19]
    pool = PoolInfo(name="a100", gpus_per_node=8, nodes=4, min_nodes=1, price_per_gpu_hour=4.1,
                    billing="on-demand", load_history=load, load_history_end=end)
    detector = OversizedPoolDetector(Policy())
    at = datetime(2026, 11, 4, 19, 30, tzinfo=UTC)
    assert isinstance(detector.forecast_window(pool, at), str)  # the quantile line alone: no window
    plan, start, stop, scale_up = detector.forecast_window(pool, at, keep_gpus=16 - 3.2)  # type: ignore[misc]
    assert start <= at.timestamp() < stop and scale_up == stop - 3600
    assert datetime.fromtimestamp(stop, UTC).hour in (6, 7)  # the night, not the next day
    # Kept capacity under tonight's upper bound: no window.
    assert isinstance(detector.forecast_window(pool, at, keep_gpus=2.0), str)


def test_the_forecaster_is_checked_from_the_hour_of_day_it_forecasts_from():
    """A pool's history of 3 days and 12 hours: the forecast starts at 12:00, so the backtest's origin is at 12:00 and
    scores the last 24 hours. Counted from the series' start it sat at 00:00 and never saw the last 12 hours, where
    the load went over every forecast (a risk of 0 where half the checked hours were missed)."""
    from agent.history.forecast import backtest_origins, plan_low_windows

    day = 20 + 10 * np.sin(2 * np.pi * np.arange(24) / 24)
    y = np.tile(day, 4)[:84]
    y[72:] += 15.0  # the last 12 hours, 00:00-12:00 of the fourth day
    plan = plan_low_windows(tuple(y), START.timestamp() + 84 * 3600, capacity=None)
    assert plan.origins == 1
    assert plan.risk == pytest.approx(0.5)  # 12 of the 24 scored hours over the upper bound
    # Every daily origin shares the live forecast's hour of day, the last one scoring the last 24 hours.
    assert backtest_origins(24 * 16 + 7, 24 * 14) == [24 * 14 + 7, 24 * 15 + 7]


def test_a_backtest_origin_never_sees_past_it_through_interpolated_hours(tmp_path):
    """Six empty hours, then an outage (0 GPUs) from an origin on. Interpolating across the empty hours drew the
    history toward 0 before the origin, and every model 'foresaw' the outage; an origin whose history ends in empty
    hours is left out (a pool's history with gaps is not forecast), while hours filled between two samples before
    an origin are kept."""
    values = 50.0 + np.random.default_rng(3).normal(0, 2.0, 24 * 17)  # steady: no hour is predicted low...
    values[384:] = 0.0  # ...until the outage from hour 384, an origin
    path = write_series(tmp_path / "outage.csv", values)
    lines = path.read_text().splitlines()
    empty = range(1 + 378 * 2, 1 + 384 * 2)  # hours 378-383 (two samples an hour after the header)
    path.write_text("\n".join(line for i, line in enumerate(lines) if i not in empty) + "\n")
    series = load_hourly(path)
    result = backtest(series)
    # Nobody foresees the outage: no hour predicted low was low (it was 24 of 24 for the last value).
    assert all(not s.window_precision for s in result.scores)
    assert result.origins == 2 and result.skipped == 1  # origins 336 and 360 kept, 384 left out
    assert series.filled_hours == 6 and series.filled is not None and series.filled[378:384].all()
