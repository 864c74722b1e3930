"""`steward sim ...` subcommands: `steward sim exporter` serves a scenario's metrics for a real Prometheus."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from core.durations import parse_duration
from sim.scenario import demo_scenario_path, load_scenario


def _duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return number


def cmd_exporter(args: argparse.Namespace, settings: Any) -> int:
    from sim.exporter_server import ExporterServer, SimExporter

    scenario = load_scenario(args.scenario or settings.scenario or demo_scenario_path())
    try:
        exporter = SimExporter(scenario, speed=args.speed, start_at=args.start_at)
        server = ExporterServer(exporter, host=args.host, port=args.port)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}")
        return 2
    print(f"Serving simulated cluster '{scenario.name}' as dcgm-exporter + cAdvisor metrics on "
          f"http://{args.host}:{server.port}/metrics (scenario clock from +{args.start_at:g}s at {args.speed:g}x "
          f"wall time; /status shows where it is). Ctrl-C stops.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def register_cli(subparsers: Any) -> None:
    sim = subparsers.add_parser("sim", help="the simulated cluster")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    exp = sim_sub.add_parser("exporter", help="serve a scenario's GPU metrics on /metrics as dcgm-exporter would")
    exp.add_argument("--scenario", type=Path, help="scenario file (default: STEWARD_SCENARIO or the built-in demo)")
    exp.add_argument("--port", type=int, default=9400, help="port to listen on (default 9400, dcgm-exporter's)")
    exp.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    exp.add_argument("--speed", type=_positive, default=1.0,
                     help="simulated seconds per wall second (default 1; 60 = a simulated minute per second)")
    exp.add_argument("--start-at", type=_duration, default=0.0, help="scenario time to start from (e.g. 2h)")
    exp.set_defaults(handler=cmd_exporter)
