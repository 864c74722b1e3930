"""Read views served from a snapshot: built once per state of what they show, then the same bytes for everyone.

The findings, approvals and savings pages change when a sweep finishes or something is written to the audit log
(an answer, an expiry, an exemption, an action's outcome: every change of state is audited). A view is keyed by
its parameters, the latest sweep's run id and the audit log's newest sequence number (one indexed read, shared
by every replica through the same store), so a request after any change sees it, and the thousands in between
cost a dictionary lookup. No lock is shared with the sweep: the graph lock is never taken here, and while one
request builds a view the others asking for the same one wait for it instead of building it again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from fastapi import Response

if TYPE_CHECKING:
    from agent.api.runtime import StewardRuntime

MAX_VIEWS = 64  # parameter combinations kept (language x template x page size): a few in practice


class Snapshots:
    """JSON bodies of read views, per (view, parameters, sweep run, audit sequence)."""

    def __init__(self, runtime: StewardRuntime, max_views: int = MAX_VIEWS) -> None:
        self.runtime = runtime
        self.max_views = max_views
        self._views: OrderedDict[Hashable, bytes] = OrderedDict()
        self._building: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()
        self.builds = 0  # how many times a view was computed (tests and /metrics read it)
        self.hits = 0

    def version(self) -> tuple[str | None, int | None]:
        latest = self.runtime.latest
        return (latest.run_id if latest else None), self.runtime.deps.audit.last_seq()

    def response(self, view: str, params: Hashable, build: Callable[[], bytes]) -> Response:
        return Response(content=self.body(view, params, build), media_type="application/json")

    def body(self, view: str, params: Hashable, build: Callable[[], bytes]) -> bytes:
        key = (view, params, self.version())
        with self._lock:
            cached = self._views.get(key)
            if cached is not None:
                self._views.move_to_end(key)
                self.hits += 1
                return cached
            gate = self._building.setdefault(key, threading.Lock())
        with gate:  # one build per key; the others wait for it and then find it cached
            with self._lock:
                cached = self._views.get(key)
                if cached is not None:
                    self.hits += 1
                    return cached
            try:
                body = build()
            finally:
                with self._lock:
                    self._building.pop(key, None)
            with self._lock:
                self.builds += 1
                self._views[key] = body
                # Older versions of a view are never asked for again: keep the newest few keys only.
                while len(self._views) > self.max_views:
                    self._views.popitem(last=False)
        return body
