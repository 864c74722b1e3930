"""Fencing: who may act, and whether the writer of an unfinished action may still be carrying it out.

A sweep run under the sweeper lease acts only while that lease is held. The scheduler (agent/scheduling) opens a
`Fence` around the sweep and its renewal thread records when the lease is lost or lapses; whatever carries out
actions (agent/graph/execute.py) asks `fence_problem()` just before each call that changes the cluster or tells
someone something, and makes none once it answers. An action's intent names its writer (`this_process()`): another
steward settles the intent only when that writer cannot still be acting on it (`process_gone`, `acting_here`).
"""

from __future__ import annotations

import contextvars
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime


class Fence:
    """The lease a sweep acts under: held until `duration_s` after its last renewal, unless recorded as lost.

    Monotonic time, local to the process: the lease is taken to end when this holder's own last renewal would have
    expired, however the lease's store counts time.
    """

    def __init__(self, holder: str, duration_s: float, asked_at: float | None = None) -> None:
        self.holder, self.duration_s = holder, duration_s
        self.lost: str | None = None
        self._lock = threading.Lock()
        self._until = (time.monotonic() if asked_at is None else asked_at) + duration_s

    def renewed(self, asked_at: float) -> None:
        """The lease was renewed by a call made at `asked_at` (time.monotonic(), taken before the call)."""
        with self._lock:
            self._until = max(self._until, asked_at + self.duration_s)

    def lose(self, why: str) -> None:
        with self._lock:
            if self.lost is None:
                self.lost = f"{why} at {datetime.now(UTC):%H:%M:%S} UTC"

    def problem(self) -> str | None:
        """Why this sweep may no longer act (None while the lease is held)."""
        with self._lock:
            if self.lost is not None:
                return self.lost
            if time.monotonic() >= self._until:
                return (f"the sweeper lease of {self.holder} was not renewed within its {self.duration_s:g} s and "
                        "has lapsed")
        return None


_current: contextvars.ContextVar[Fence | None] = contextvars.ContextVar("steward_fence", default=None)


@contextmanager
def fenced_by(fence: Fence) -> Iterator[Fence]:
    """Everything run inside (in this thread, and in tasks that copy its context) acts under `fence`."""
    token = _current.set(fence)
    try:
        yield fence
    finally:
        _current.reset(token)


def current_fence() -> Fence | None:
    return _current.get()


def fence_problem() -> str | None:
    """Why the running sweep may not act now: it lost the lease it runs under. None outside a fenced sweep."""
    fence = _current.get()
    return fence.problem() if fence is not None else None


# This process: host/pid names it to another process (as approval claims do); the token tells it from an earlier
# process with the same host and pid (a container restarted in its pod runs as pid 1 again).
_TOKEN = uuid.uuid4().hex[:12]
_acting: set[str] = set()
_acting_lock = threading.Lock()


def host_name() -> str:
    return socket.gethostname() or "localhost"


def this_process() -> dict[str, str]:
    """What an intent records of its writer."""
    return {"writer": f"{host_name()}/{os.getpid()}", "process": f"{os.getpid()}:{_TOKEN}"}


def is_this_process(process: str | None) -> bool:
    return process == f"{os.getpid()}:{_TOKEN}"


@contextmanager
def acting(action_id: str) -> Iterator[None]:
    """Mark an action as being carried out by this process, from before its intent is written to its outcome."""
    with _acting_lock:
        _acting.add(action_id)
    try:
        yield
    finally:
        with _acting_lock:
            _acting.discard(action_id)


def acting_here(action_id: str) -> bool:
    with _acting_lock:
        return action_id in _acting


def process_gone(holder: str | None, *, here: str | None = None, this_pid_is_another: bool = False) -> bool:
    """Whether the process named `host/pid` is known to have ended: it was on this host (`here`, default this
    machine's name) and runs no longer.

    A process on another host, or a live one here (under any user), is not known to have ended. With
    `this_pid_is_another`, the caller knows it is not that process although it has its host and pid (a restart that
    was given the same pid): that process has ended.
    """
    if not holder:
        return False
    host, _, pid = holder.rpartition("/")
    if not pid.isdigit() or host != (here or host_name()):
        return False
    if int(pid) == os.getpid():
        return this_pid_is_another
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it runs, under another user
        return False
    return False
