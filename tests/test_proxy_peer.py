"""Proxy mode believes X-Forwarded-User only from a peer in STEWARD_TRUSTED_PROXIES, and the peer must be the TCP
peer. uvicorn's default proxy_headers=True replaced the peer with the caller's X-Forwarded-For for any loopback
connection (forwarded_allow_ips=127.0.0.1), so anyone on loopback (`kubectl port-forward`, a sidecar) could pose as
the proxy and be any user, approver included; and a proxy on the same host was refused as soon as it added
X-Forwarded-For, as proxies do. `steward serve` and serve_in_thread run uvicorn with proxy_headers=False."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from agent.api.local_server import serve_in_thread
from server import create_app
from tests.conftest import free_port
from tests.test_server_api import START, settings_for

FORGED = {"X-Forwarded-User": "mallory", "X-Forwarded-Groups": "steward-approvers"}


@contextmanager
def steward_serve(data_dir: Path, trusted: str) -> Iterator[str]:
    """A real `steward serve` (uvicorn as it runs in production) in proxy mode, trusting `trusted`."""
    port = free_port()
    env = {**os.environ, "HOME": str(data_dir), "STEWARD_DATA_DIR": str(data_dir / "data"), "STEWARD_LEADER_LOCK": "none",
           "STEWARD_TRUST_PROXY_HEADERS": "true", "STEWARD_TRUSTED_PROXIES": trusted}
    steward = Path(sys.executable).parent / "steward"
    proc = subprocess.Popen([str(steward), "serve", "--port", str(port), "--speed", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code in (200, 503):
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "steward serve did not start"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_a_loopback_caller_cannot_pose_as_the_trusted_proxy_with_x_forwarded_for(tmp_path):
    with steward_serve(tmp_path, '["10.0.0.7"]') as base:  # the ingress proxy lives at 10.0.0.7
        direct = httpx.get(base + "/api/status", headers=FORGED)
        assert direct.status_code == 401  # 127.0.0.1 is not the proxy: headers not believed
        posed = httpx.get(base + "/api/status", headers={**FORGED, "X-Forwarded-For": "10.0.0.7"})
        assert posed.status_code == 401, (
            f"a loopback caller (kubectl port-forward, a sidecar) that only adds 'X-Forwarded-For: 10.0.0.7' is "
            f"believed as {posed.json().get('role')!r} mallory: {posed.status_code}")
        forwarded = httpx.post(base + "/api/sweeps", headers={**FORGED, "X-Forwarded-For": "10.0.0.7",
                                                              "Forwarded": "for=10.0.0.7"})
        assert forwarded.status_code == 401


def test_a_proxy_on_the_same_host_that_adds_x_forwarded_for_is_believed(tmp_path):
    with steward_serve(tmp_path, '["127.0.0.1"]') as base:  # an oauth2-proxy sidecar on loopback
        user = {"X-Forwarded-User": "ann", "X-Forwarded-Groups": "steward-approvers"}
        assert httpx.get(base + "/api/status", headers=user).status_code == 200
        # what the sidecar really sends: the browser's address in X-Forwarded-For, as every proxy adds it
        via_proxy = httpx.get(base + "/api/status", headers={**user, "X-Forwarded-For": "203.0.113.9"})
        assert via_proxy.status_code == 200, (
            f"the listed proxy (127.0.0.1) is refused as soon as it adds X-Forwarded-For: {via_proxy.status_code}")
        assert via_proxy.json()["role"] == "approver"


def test_serve_in_thread_also_takes_the_tcp_peer_not_x_forwarded_for(tmp_path):
    settings = settings_for(tmp_path, trust_proxy_headers=True, trusted_proxies=["10.0.0.7"])
    app = create_app(settings, speed=0, start_s=START, run_scheduler=False)
    with serve_in_thread(app, free_port()) as base:
        posed = httpx.get(base + "/api/status", headers={**FORGED, "X-Forwarded-For": "10.0.0.7"})
        assert posed.status_code == 401, posed.text
