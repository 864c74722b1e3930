"""Opening the SQLite stores so that a read-only, full or locked data dir degrades the steward instead of killing it.

A store that cannot be written is opened read-only (its history stays readable) and every write to it raises
StoreUnavailable naming the file and the reason; `Problem.reason` is the short code that /healthz and the
`steward_degraded{reason=...}` metric report.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from agent.records import pg
from agent.records.pg import ValueRefused  # noqa: F401 - a value Postgres refuses: the caller's error (422)

# The reason codes (metric label values). Each names what an operator has to fix.
READONLY = "data_dir_readonly"  # the data dir or a store file cannot be written
FULL = "data_dir_full"  # no space left for the stores
LOCKED = "db_locked"  # another connection held a store's write lock past the busy timeout
DB_ERROR = "db_error"  # any other SQLite or I/O error on a store

BUSY_TIMEOUT_S = 5.0  # how long a write waits for another writer's lock before the store reports db_locked


@dataclass(frozen=True)
class Problem:
    """One reason the steward is degraded: a short code (a metric label) and what happened, for people."""

    reason: str
    detail: str


class StoreUnavailable(RuntimeError):
    """A store could not be written (read-only, full, locked, I/O error); nothing was recorded."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


def probe_dir(directory: Path) -> Problem | None:
    """Whether a file can be created and written in `directory` right now; the problem if not."""
    probe = directory / f".steward-write-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"probe\n")
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as exc:
        return _os_problem(exc, directory)
    return None


def _os_problem(exc: OSError, where: Path | str) -> Problem:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return Problem(FULL, f"{where}: no space left ({exc.strerror})")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return Problem(READONLY, f"{where}: cannot write ({exc.strerror})")
    return Problem(DB_ERROR, f"{where}: {exc.strerror or exc}")


def _unwritable_files(file: Path) -> Problem | None:
    """The store's own files (database, WAL, shared memory) that exist but cannot be written, if any."""
    for part in (file, file.with_name(file.name + "-wal"), file.with_name(file.name + "-shm")):
        if part.exists() and not os.access(part, os.W_OK):
            return Problem(READONLY, f"{part}: cannot write (file is read-only)")
    return None


def classify(exc: BaseException, path: str) -> Problem:
    """What a failed write to the store at `path` (a file, or a Postgres URL) means for the operator."""
    if pg.is_url(path):
        where = pg.redact(path)
        if isinstance(exc, pg.errors()) and getattr(exc, "sqlstate", None) in ("55P03", "40P01", "57014"):
            return Problem(LOCKED, f"{where}: {exc} (lock not available)")
        if getattr(exc, "sqlstate", None) in ("53100",):  # disk_full
            return Problem(FULL, f"{where}: {exc}")
        if getattr(exc, "sqlstate", None) == "25006":  # read_only_sql_transaction: a standby
            return Problem(READONLY, f"{where}: {exc}")
        return Problem(DB_ERROR, f"{where}: {str(exc).strip()}")
    if isinstance(exc, OSError):
        return _os_problem(exc, path)
    text = str(exc)
    lowered = text.lower()
    if "locked" in lowered or "busy" in lowered:
        return Problem(LOCKED, f"{path}: {text} (another process held its write lock for more than "
                               f"{BUSY_TIMEOUT_S:g} s)")
    if "full" in lowered:
        return Problem(FULL, f"{path}: {text}")
    if "readonly" in lowered or "read-only" in lowered:
        return Problem(READONLY, f"{path}: {text}")
    # "unable to open database file", "disk I/O error": the directory says which.
    found = probe_dir(Path(path).parent) if path != ":memory:" else None
    if found is not None:
        return Problem(found.reason, f"{path}: {text}; {found.detail}")
    return Problem(DB_ERROR, f"{path}: {text}")


def dialect(conn: Any) -> str:
    """"sqlite" or "postgres": which SQL a store's connection speaks, where the stores' SQL must differ."""
    return getattr(conn, "dialect", "sqlite")


def open_store(path: str, schema: str, table: str, *, wal: bool,
               migrate: Callable[[Any], None] | None = None, timeout: float = BUSY_TIMEOUT_S,
               autocommit: bool = True, readonly: bool = False, pg_schema: str | None = None) -> tuple[Any, Problem | None]:
    """(connection, None) for a writable store; (read-only connection, the problem) when it cannot be written.

    `table`: the store's main table (a readable file without it counts as no store). `autocommit`: the
    connection commits each statement (isolation_level None) unless False (Python's default transactions).
    `readonly`: only read it (`steward audit verify`): FileNotFoundError when there is no such store.

    The directory is probed before SQLite touches the file: on an unwritable directory the database is never
    opened for writing (no WAL shared memory is created or mapped for writing). Read-only falls back from
    `mode=ro` (sees the WAL) to `immutable=1` (no WAL, for a WAL database whose -shm cannot be created), and
    to an empty in-memory store when no file can be read at all (nothing was ever recorded there).

    `path` may be a Postgres URL (STEWARD_DATABASE_URL): the store's tables are created there from `pg_schema`,
    and a database that cannot be reached degrades the store the same way (an empty in-memory store, writes
    refused, the problem reported) rather than stopping the steward.
    """
    if pg.is_url(path):
        return _open_postgres(path, schema, table, pg_schema, autocommit=autocommit, readonly=readonly)
    if path == ":memory:":
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None if autocommit else "DEFERRED")
        conn.execute("PRAGMA journal_mode=MEMORY")
        conn.executescript(schema)
        if migrate is not None:
            migrate(conn)
        return conn, None
    file = Path(path)
    problem: Problem | None
    if readonly:
        if not file.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        problem = Problem(READONLY, f"{path}: opened to read only")
    else:
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = _os_problem(exc, file.parent)
        else:
            found = probe_dir(file.parent)
            problem = Problem(found.reason, f"{path}: {found.detail}") if found else _unwritable_files(file)
    if problem is None:
        try:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None if autocommit else "DEFERRED",
                                   timeout=timeout)
            if wal:
                conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(schema)
            if migrate is not None:
                migrate(conn)
            return conn, None
        except (sqlite3.Error, OSError) as exc:
            problem = classify(exc, path)
    if not readonly:
        problem = Problem(problem.reason, f"{problem.detail}; opened read-only, writes refused until it is fixed "
                                          "and the steward restarted")
    for mode in ("mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(f"file:{quote(str(file.resolve()))}?{mode}", uri=True, check_same_thread=False,
                                   isolation_level=None if autocommit else "DEFERRED", timeout=timeout)
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone():
                return conn, problem
            conn.close()
            break  # readable, but the store was never created in it
        except sqlite3.Error:
            continue
    if readonly:
        raise FileNotFoundError(f"{path}: not a readable {table} store")
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None if autocommit else "DEFERRED")
    conn.executescript(schema)
    if migrate is not None:
        migrate(conn)
    return conn, Problem(problem.reason, f"{problem.detail} (no readable {file.name}: an empty store)")


def _open_postgres(url: str, schema: str, table: str, pg_schema: str | None, *, autocommit: bool,
                   readonly: bool) -> tuple[Any, Problem | None]:
    if pg_schema is None:
        raise ValueError(f"the {table} store has no Postgres schema")
    try:
        conn = pg.connect(url, "" if readonly else pg_schema, table)
    except ImportError as exc:
        raise ValueError("STEWARD_DATABASE_URL needs psycopg: pip install 'gpu-steward[postgres]'") from exc
    except pg.errors() as exc:
        problem = classify(exc, url)
        problem = Problem(problem.reason, f"{problem.detail}; cannot reach the database, writes refused until it "
                                          "is reachable and the steward restarted (an empty store meanwhile)")
        if readonly:
            raise FileNotFoundError(problem.detail) from exc
        empty = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None if autocommit else "DEFERRED")
        empty.executescript(schema)
        return empty, problem
    if readonly:
        if table not in {r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()").fetchall()}:
            conn.close()
            raise FileNotFoundError(f"{pg.redact(url)}: no {table} table")
        return conn, Problem(READONLY, f"{pg.redact(url)}: opened to read only")
    return conn, None


def columns(conn: Any, table: str) -> set[str]:
    if dialect(conn) == "postgres":
        return pg.columns(conn, table)
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


DB_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, *pg.errors())  # what a store's failed write raises


REOPEN_S = 10.0  # how often a store whose open failed is opened again, at most


class Reopening:
    """A store whose open failed (a lock held past the busy timeout, a database down at start) is opened again when
    next used or looked at, at most every REOPEN_S seconds: a moment's failure is not one for the life of the process
    (`/healthz` named it, and the replica stayed unready, until a restart). `problem` is None once it opened."""

    _conn: Any
    problem: Problem | None
    path: str
    _open_args: tuple[str, str, str, dict[str, Any]]
    _next_open: float = 0.0
    # The last use failed (a lock held past the busy timeout, a full disk) and none has worked since: every callback
    # or link is refused meanwhile, so /healthz must say so, as it does for the audit log's failed writes.
    write_problem: Problem | None = None

    def problems(self) -> list[Problem]:
        """Why the store cannot be used right now (its open failed, or its last use did); empty: it can."""
        return [p for p in (self.problem, self.write_problem) if p is not None]

    def _failed(self, exc: BaseException) -> StoreUnavailable:
        """The error a failed use raises, remembered until a use works (`_worked`)."""
        self.write_problem = classify(exc, self.path)
        return StoreUnavailable(self.write_problem)

    def _worked(self) -> None:
        self.write_problem = None

    def _open(self, location: str, schema: str, table: str, **kw: Any) -> None:
        self._open_args = (location, schema, table, kw)
        self._conn, self.problem = open_store(location, schema, table, **kw)
        self._next_open = time.monotonic() + REOPEN_S

    def healthy(self) -> Problem | None:
        """The store's problem now, after opening it again when its open failed and the last try is old enough."""
        if self.problem is not None and time.monotonic() >= self._next_open:
            location, schema, table, kw = self._open_args
            self._next_open = time.monotonic() + REOPEN_S
            conn, problem = open_store(location, schema, table, **kw)
            old, keep = (self._conn, conn) if problem is None else (conn, self._conn)
            self._conn, self.problem = keep, problem
            with contextlib.suppress(Exception):  # closing the connection that is not kept: nothing rides on it
                old.close()
        return self.problem
