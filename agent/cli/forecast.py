"""`steward forecast`: the next 24 h of allocated GPUs per pool and the low-load windows; `forecast backtest`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import numpy as np

from agent.history.forecast import (
    HORIZON_H,
    MIN_FORECAST_H,
    ForecastError,
    forecast,
    low_threshold,
    predicted_low,
    windows,
)
from evals.forecast_backtest import backtest, print_table, to_json
from evals.series import HourlySeries, SeriesError, load_hourly


@dataclass
class PoolHistory:
    pool: str
    start: datetime  # the first hour
    values: np.ndarray  # allocated GPUs, hourly mean
    capacity: float | None
    filled: np.ndarray | None = None  # hours a recorded series had no sample for (interpolated)


def simulated_pools(scenario_path: Path | None) -> list[PoolHistory]:
    """Allocated GPUs per pool, hour by hour: its `history:` up to the run's start, else the simulated run."""
    from sim.cluster import SimCluster
    from sim.scenario import demo_scenario_path, load_scenario

    scenario = load_scenario(scenario_path or demo_scenario_path())
    cluster = SimCluster(scenario)
    cluster.advance_to(scenario.duration)
    runs = cluster.lifecycle.runs
    out = []
    for pool in scenario.pools:
        minutes = np.arange(0.0, scenario.duration, 60.0)
        used = np.array([sum(len(r.gpus) for r in runs if r.node is not None and r.node.pool == pool.name
                             and r.running_at(t)) for t in minutes], dtype=float)
        hours = [used[i:i + 60].mean() for i in range(0, len(used), 60)]
        capacity = float(pool.nodes * pool.gpus_per_node)
        start = scenario.start
        if pool.history is not None:
            # The scenario's `history:` extension, the pool's past up to the run's start: what the sweep's pool
            # detector forecasts from, so this shows the windows the steward acts on.
            end, past = pool.history.hourly(scenario.start, capacity)
            start, hours = end - timedelta(hours=len(past)), past
        out.append(PoolHistory(pool.name, start, np.asarray(hours), capacity))
    return out


def _series_of(p: PoolHistory) -> HourlySeries:
    capacity = None if p.capacity is None else np.full(len(p.values), p.capacity)
    filled = 0 if p.filled is None else int(p.filled.sum())
    return HourlySeries(path=p.pool, start=p.start, values=p.values, capacity=capacity, filled_hours=filled,
                        columns={"time": "", "value": "allocated GPUs", "capacity": ""}, rows=len(p.values),
                        filled=p.filled)


def pool_forecast(p: PoolHistory) -> dict[str, Any]:
    """The pool's next 24 h with the model its own past picked, or why there is none."""
    doc: dict[str, Any] = {"pool": p.pool, "capacity": p.capacity, "history_hours": len(p.values),
                           "now": round(float(p.values[-1]), 2) if len(p.values) else None}
    if len(p.values) < MIN_FORECAST_H:
        doc.update(model=None, hours=[], windows=[], needs_hours=MIN_FORECAST_H)
        return doc
    model = backtest(_series_of(p)).default
    f = forecast(model, p.values, HORIZON_H, p.capacity)
    threshold = low_threshold(p.values)
    low = predicted_low(f, threshold)
    first = p.start + timedelta(hours=len(p.values))
    doc.update(model=model, low_threshold=round(threshold, 2), hours=[
        {"at": (first + timedelta(hours=h)).isoformat(), "mean": round(float(f.mean[h]), 2),
         "lower": round(float(f.lower[h]), 2), "upper": round(float(f.upper[h]), 2), "low": bool(low[h])}
        for h in range(HORIZON_H)],
        windows=[{"start": (first + timedelta(hours=a)).isoformat(), "end": (first + timedelta(hours=b)).isoformat()}
                 for a, b in windows(low)])
    return doc


def _print_pool(doc: dict[str, Any], zh: bool, zone: tzinfo, zone_name: str) -> None:
    """One pool's forecast, its hours in the display zone (STEWARD_DISPLAY_TZ)."""
    cap = f"{doc['capacity']:g}" if doc["capacity"] is not None else "?"
    now = doc["now"]
    if zh:
        print(f"资源池 {doc['pool']}：容量 {cap} 块 GPU，当前已分配 {now:g} 块（最近一小时均值），"
              f"历史 {doc['history_hours']} 小时")
    else:
        print(f"Pool {doc['pool']}: capacity {cap} GPUs, {now:g} allocated (last hour's mean), "
              f"{doc['history_hours']} h of history")
    if doc["model"] is None:
        need = doc["needs_hours"]
        print(f"  历史不足 {need} 小时（拟合 2 天 + 验证 1 天），暂不预测。" if zh else
              f"  Not forecast: it takes {need} h of history (2 days to fit, 1 day to check the forecaster "
              "against seasonal-naive).")
        return
    print(f"  模型：{doc['model']}；低负载：区间上界不超过 {doc['low_threshold']:g}" if zh else
          f"  model: {doc['model']}; low load: upper bound <= {doc['low_threshold']:g}")
    def label(iso: str) -> str:
        at = datetime.fromisoformat(iso).astimezone(zone)
        return f"{at:%m-%d %H:%M} {zone_name}" if zh else f"{at:%a %H:%M} {zone_name}"

    width = len(label(doc["hours"][0]["at"])) if doc["hours"] else 10
    # Column heads (the labels' own width: Chinese characters are two columns wide, the heads are padded by hand)
    print(f"  {'时间':<{width - 2}}  {'预测':>5}  [90% 区间]（已分配 GPU 数）" if zh else
          f"  {'hour':<{width}}  {'mean':>7}  [90% interval] (allocated GPUs)")
    for h in doc["hours"]:
        mark = "  <- " + ("低" if zh else "low") if h["low"] else ""
        print(f"  {label(h['at'])}  {h['mean']:7.1f}  [{h['lower']:6.1f}, {h['upper']:6.1f}]{mark}")
    if not doc["windows"]:
        print("  未来 24 小时没有预测到低负载窗口。" if zh else "  No low-load window predicted in the next 24 h.")
    for w in doc["windows"]:
        a, b = (datetime.fromisoformat(w[k]).astimezone(zone) for k in ("start", "end"))
        hours = (b - a).total_seconds() / 3600
        print(f"  低负载窗口：{a:%m-%d %H:%M} 至 {b:%m-%d %H:%M} {zone_name}（{hours:g} 小时）" if zh else
              f"  Low-load window: {a:%a %H:%M} to {b:%a %H:%M} {zone_name} ({hours:g} h)")


def cmd_forecast(args: argparse.Namespace, settings: Any) -> int:
    zh = (args.lang or getattr(settings, "language", "en")) == "zh"
    try:
        if args.history:
            s = load_hourly(args.history, time_col=args.time_col, value_col=args.value_col,
                            capacity_col=args.capacity_col)
            cap = float(s.capacity[-1]) if s.capacity is not None else None
            pools = [PoolHistory(Path(s.path).name, s.start, s.values, cap, s.filled)]
        else:
            pools = simulated_pools(args.scenario)
        docs = [pool_forecast(p) for p in pools]
    except (SeriesError, ForecastError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"pools": docs}, ensure_ascii=False, indent=2))
        return 0
    for doc in docs:
        _print_pool(doc, zh, settings.zone(), settings.display_tz)
    return 0


def cmd_forecast_backtest(args: argparse.Namespace, settings: Any) -> int:
    try:
        series = load_hourly(args.trace, time_col=args.time_col, value_col=args.value_col,
                             capacity_col=args.capacity_col)
        result = backtest(series, all_hours=True)
    except (SeriesError, ForecastError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    else:
        print_table(result)
    return 0


def _columns(p: argparse.ArgumentParser) -> None:
    p.add_argument("--time-col", help="time column: epoch seconds or ISO 8601 (default: auto-detect)")
    p.add_argument("--value-col", help="load column, e.g. allocated GPUs or busy nodes (default: auto-detect)")
    p.add_argument("--capacity-col", help="capacity column; forecasts never exceed it (default: auto-detect, optional)")


def register_cli(subparsers: Any) -> None:
    p = subparsers.add_parser("forecast", help="next 24 h of allocated GPUs per pool, with low-load windows")
    p.add_argument("--history", type=Path, help="forecast this recorded series (CSV) instead of the simulated pools")
    p.add_argument("--scenario", type=Path, help="scenario file to simulate (default: the built-in demo)")
    p.add_argument("--lang", choices=["en", "zh"])
    p.add_argument("--json", action="store_true")
    _columns(p)
    p.set_defaults(handler=cmd_forecast)
    sub = p.add_subparsers(dest="forecast_command")
    bt = sub.add_parser("backtest", help="rolling-origin backtest: forecasters vs seasonal-naive on a recorded series")
    bt.add_argument("trace", type=Path, help="CSV (or .csv.gz) with a time column and a load column")
    bt.add_argument("--json", action="store_true")
    _columns(bt)
    bt.set_defaults(handler=cmd_forecast_backtest)
