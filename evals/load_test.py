"""Load test: drive `steward serve` on loopback and print throughput, p50/p99 and errors per concurrency level.

    .venv/bin/python -m evals.load_test [--clients 1,20,200] [--seconds 10] [--url URL] [--json]

Without --url it starts `steward serve` on the built-in demo (a fresh data dir, a free loopback port, the demo's
simulated clock at 60x, so a sweep runs every 5 wall seconds while the load runs) and waits for its first sweep.
Every client loops over the operator's reads and writes the UI and ChatOps make: findings, approvals, savings,
status, audit pages (moving offsets), a chat question, and an Alertmanager webhook burst (the same firing alert
again and again: deduped by the server). Each level runs for --seconds after a one-second warm-up. A request is
an error when it raises or answers anything but 2xx. The load generator (aiohttp, one event loop) runs on the
same machine as the server, as the targets in issue 18 ask.

Targets (two cores, generator beside the server): no collapse (throughput at the highest level at least 90 % of
that at one client), p99 under 100 ms at 20 clients, zero errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

WEBHOOK_TOKEN = "load-test-webhook-token"
ALERT = {
    "version": "4", "status": "firing", "receiver": "gpu-steward", "groupKey": "{}:{alertname=\"GPUXidError\"}",
    "groupLabels": {"alertname": "GPUXidError"}, "commonLabels": {"alertname": "GPUXidError", "severity": "critical"},
    "commonAnnotations": {}, "externalURL": "http://alertmanager.local", "truncatedAlerts": 0,
    "alerts": [{"status": "firing", "labels": {"alertname": "GPUXidError", "severity": "critical", "node": "gpu-node-1",
                                               "Hostname": "gpu-node-1", "gpu": "0", "xid": "79"},
                "annotations": {"summary": "XID 79 on gpu-node-1"}, "startsAt": "2026-11-02T08:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus.local/graph",
                "fingerprint": "load-test-xid79"}],
}


def requests_mix(k: int) -> tuple[str, str, dict[str, Any] | None, dict[str, str]]:
    """(method, path, json body, headers) for a client's k-th request: mostly the UI's reads, some writes."""
    cycle = k % 10
    if cycle in (0, 5):
        return "GET", "/api/findings", None, {}
    if cycle in (1, 6):
        return "GET", "/api/approvals", None, {}
    if cycle == 2:
        return "GET", "/api/savings", None, {}
    if cycle == 3:
        return "GET", f"/api/audit?limit=50&offset={(k * 7) % 200}", None, {}
    if cycle == 4:
        return "GET", "/api/status", None, {}
    if cycle == 7:
        return "GET", "/api/findings?lang=zh", None, {}
    if cycle == 8:
        return "POST", "/api/chat", {"message": "what is idle right now?"}, {}
    return "POST", "/api/alerts", ALERT, {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}


@dataclass
class Level:
    clients: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    by_path: dict[str, list[float]] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {"clients": self.clients, "requests": len(lat) + self.errors,
                "throughput_rps": round((len(lat) + self.errors) / self.seconds, 1),
                "p50_ms": round(pct(lat, 50) * 1000, 1), "p99_ms": round(pct(lat, 99) * 1000, 1),
                "errors": self.errors, "error_kinds": self.error_kinds,
                "p99_ms_by_path": {p: round(pct(sorted(v), 99) * 1000, 1) for p, v in sorted(self.by_path.items())}}


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


async def one(session: aiohttp.ClientSession, base: str, k: int, level: Level | None) -> None:
    method, path, body, headers = requests_mix(k)
    began = time.perf_counter()
    key = path.split("?")[0]
    try:
        async with session.request(method, base + path, json=body, headers=headers) as resp:
            await resp.read()  # a chat answer streams: the request ends when its last event has arrived
            ok = 200 <= resp.status < 300
            kind = f"{key} {resp.status}"
    except Exception as exc:  # noqa: BLE001 - every failure is counted and named
        ok, kind = False, f"{key} {type(exc).__name__}"
    took = time.perf_counter() - began
    if level is None:
        return
    if ok:
        level.latencies.append(took)
        level.by_path.setdefault(key, []).append(took)
    else:
        level.errors += 1
        level.error_kinds[kind] = level.error_kinds.get(kind, 0) + 1


async def run_level(base: str, clients: int, seconds: float, warmup: float = 1.0) -> Level:
    level = Level(clients, seconds)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        measuring_from = start + warmup
        ends = measuring_from + seconds

        async def client(c: int) -> None:
            k = c  # each client walks the whole mix, starting at its own place in it
            while True:
                now = time.perf_counter()
                if now >= ends:
                    return
                await one(session, base, k, level if now >= measuring_from else None)
                k += 1

        await asyncio.gather(*(client(c) for c in range(clients)))
    return level


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: Path, port: int, speed: float | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "STEWARD_DATA_DIR": str(data_dir), "STEWARD_ALERT_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
           "PYTHONUNBUFFERED": "1"}
    for key in ("STEWARD_API_TOKENS", "STEWARD_LLM_BASE_URL", "STEWARD_BACKEND"):
        env.pop(key, None)
    log = open(data_dir / "serve.log", "wb")  # noqa: SIM115 - closed with the process
    extra = ["--speed", f"{speed:g}"] if speed is not None else []
    return subprocess.Popen([sys.executable, "-m", "agent.cli.main", "serve", "--port", str(port), *extra],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


async def wait_ready(base: str, proc: subprocess.Popen[bytes] | None, timeout: float = 600.0) -> None:
    """Until the server answers and its first sweep has finished (findings carry a run id)."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise SystemExit(f"steward serve exited with {proc.returncode} before it was ready")
            try:
                async with session.get(base + "/api/findings") as resp:
                    if resp.status == 200 and (await resp.json()).get("run_id"):
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(1.0)
    raise SystemExit(f"the server at {base} was not ready within {timeout:.0f} s")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'clients':>7} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}"]
    for r in rows:
        lines.append(f"{r['clients']:>7} {r['requests']:>8} {r['throughput_rps']:>8.1f} {r['p50_ms']:>8.1f} "
                     f"{r['p99_ms']:>8.1f} {r['errors']:>6}")
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    first, last = rows[0], rows[-1]
    at20 = next((r for r in rows if r["clients"] == 20), None)
    keeps = last["throughput_rps"] >= 0.9 * first["throughput_rps"] if first["throughput_rps"] else False
    return {"no_collapse": keeps, "throughput_ratio": round(last["throughput_rps"] / first["throughput_rps"], 2)
            if first["throughput_rps"] else None,
            "p99_under_100ms_at_20": at20 is not None and at20["p99_ms"] < 100.0,
            "zero_errors": all(r["errors"] == 0 for r in rows)}


async def main_async(args: argparse.Namespace) -> int:
    proc = None
    tmp = None
    base = args.url
    if base is None:
        tmp = tempfile.TemporaryDirectory(prefix="steward-load-")
        port = free_port()
        proc = start_server(Path(tmp.name), port, args.speed)
        base = f"http://127.0.0.1:{port}"
    try:
        began = time.perf_counter()
        await wait_ready(base, proc)
        if not args.json:
            print(f"server ready at {base} after {time.perf_counter() - began:.1f} s; "
                  f"{args.seconds:g} s per level", flush=True)
        rows = []
        for clients in args.clients:
            level = await run_level(base, clients, args.seconds)
            rows.append(level.row())
            if not args.json:
                print(table(rows[-1:]).splitlines()[-1] if rows[:-1] else table(rows), flush=True)
        result = {"base": base, "seconds_per_level": args.seconds, "levels": rows, "verdict": verdict(rows)}
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            for r in rows:
                if r["error_kinds"]:
                    print(f"errors at {r['clients']} clients: {r['error_kinds']}")
                slow = ", ".join(f"{p} {ms:g}" for p, ms in r["p99_ms_by_path"].items())
                print(f"p99 ms by path at {r['clients']} clients: {slow}")
            print(f"verdict: {result['verdict']}")
        return 0
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if tmp is not None:
            tmp.cleanup()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,20,200",
                        type=lambda s: [int(x) for x in s.split(",") if x.strip()],
                        help="concurrency levels, comma-separated (default 1,20,200)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per level (default 10)")
    parser.add_argument("--url", help="drive this running server instead of starting the demo")
    parser.add_argument("--speed", type=float, help="the demo's simulated seconds per wall second (default: serve's 60, "
                                                    "a sweep every 5 wall seconds; 0 stops the clock: no sweeps)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if not args.clients or min(args.clients) < 1:
        parser.error("--clients needs positive integers, e.g. 1,20,200")
    return args


def main(argv: list[str] | None = None) -> int:
    # A SIGTERM (timeout, Ctrl-C in a wrapper) unwinds through main_async's finally: the server it started stops.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
