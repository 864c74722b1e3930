"""Run the app with uvicorn in a background thread on a loopback port (browser tests, screenshots)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI


@contextmanager
def serve_in_thread(app: FastAPI, port: int, host: str = "127.0.0.1") -> Iterator[str]:
    """Yields the base URL once the server accepts requests; stops it (and its lifespan) on exit."""
    import uvicorn

    # proxy_headers=False as in `steward serve`: the peer is the TCP peer, never a caller's X-Forwarded-For.
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on",
                                           proxy_headers=False))
    thread = threading.Thread(target=server.run, name="steward-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
