"""Serves a simulated cluster's /metrics over HTTP the way dcgm-exporter (and cAdvisor, and vLLM) would, on a running
clock."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sim.cadvisor import ProcessCounters
from sim.cluster import SimCluster
from sim.scenario import Scenario
from sim.vllm import ServingCounters


class SimExporter:
    """The scenario played on wall time x `speed` from `start_at`; each scrape renders that instant.

    Prometheus stamps samples with its own scrape time, so a query at wall time W sees the scenario at
    `offset_at(W)`. The clock stops at the scenario's end and keeps serving that instant.
    """

    def __init__(self, scenario: Scenario, *, speed: float = 1.0, start_at: float = 0.0,
                 wall_clock: Callable[[], float] = time.time) -> None:
        if speed <= 0:
            raise ValueError(f"--speed must be positive, got {speed}")
        if not 0 <= start_at <= scenario.duration:
            raise ValueError(f"--start-at {start_at:g}s is outside the scenario (0 to {scenario.duration:g}s)")
        self.scenario = scenario
        self.speed = speed
        self.start_at = start_at
        self.wall_clock = wall_clock
        self.cluster = SimCluster(scenario)
        self.cluster.advance_to(start_at)
        self.counters = ProcessCounters(self.cluster.lifecycle, scenario.step)
        self.serving = ServingCounters(self.cluster.lifecycle, scenario.step)  # vLLM metrics of serving jobs
        self.wall0 = wall_clock()
        self._lock = threading.Lock()

    def offset_at(self, wall: float) -> float:
        return min(self.start_at + (wall - self.wall0) * self.speed, self.scenario.duration)

    def wall_at(self, offset: float) -> float:
        """The wall time at which the exporter serves scenario offset `offset`."""
        return self.wall0 + (offset - self.start_at) / self.speed

    def time_shift(self) -> timedelta:
        """Add to a simulated instant to get the wall time Prometheus stored it under (speed 1 only)."""
        if self.speed != 1:
            raise ValueError("a constant time shift exists only at --speed 1")
        return timedelta(seconds=self.wall_at(0.0) - self.scenario.start.timestamp())

    def scrape(self) -> str:
        with self._lock:
            offset = max(self.offset_at(self.wall_clock()), self.cluster.offset_s)
            self.cluster.advance_to(offset)
            return self.cluster.exporter_text() + self.counters.render(offset) + self.serving.render(offset)

    def status(self) -> dict[str, Any]:
        offset = self.cluster.offset_s
        return {"scenario": self.scenario.name, "offset_s": offset, "speed": self.speed,
                "at": (self.scenario.start + timedelta(seconds=offset)).isoformat(), "wall0": self.wall0,
                "start_at": self.start_at}


class ExporterServer:
    """HTTP front for a SimExporter: /metrics (text format 0.0.4) and /status (JSON) on a background thread."""

    def __init__(self, exporter: SimExporter, host: str = "127.0.0.1", port: int = 9400) -> None:
        self.exporter = exporter
        sim = exporter

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, sim.scrape(), "text/plain; version=0.0.4; charset=utf-8")
                elif path == "/status":
                    self._send(200, json.dumps(sim.status()), "application/json")
                else:
                    self._send(404, "try /metrics\n", "text/plain")

            def _send(self, code: int, body: str, content_type: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> ExporterServer:
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,), daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever(0.5)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
