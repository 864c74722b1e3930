"""Postgres behind the stores' SQLite-shaped calls: the one small dialect layer (STEWARD_DATABASE_URL).

The stores keep one code path: they write `?` placeholders and `BEGIN IMMEDIATE` as for SQLite, and this
layer turns them into `%s` and `BEGIN`; what really differs (schemas, the audit's append lock, JSON lookup,
upserts) the stores choose by `dialect(conn)`. psycopg is imported only when a Postgres URL is configured.
"""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

SCHEMES = ("postgresql://", "postgres://")
_PLACEHOLDER = re.compile(r"\?")


def is_url(location: str) -> bool:
    return location.startswith(SCHEMES)


def redact(location: str) -> str:
    """The URL without its password, for logs, /healthz and error messages; a path as it is."""
    if not is_url(location):
        return location
    parts = urlsplit(location)
    if parts.password is None:
        return location
    netloc = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=netloc[0].split(":", 1)[0] + ":***@" + netloc[1]))


def lock_key(name: str) -> int:
    """A stable 32-bit advisory-lock key for a name (the same on every replica)."""
    return zlib.crc32(name.encode())


def _translate(sql: str) -> str:
    stripped = sql.strip().upper()
    if stripped in ("BEGIN IMMEDIATE", "BEGIN EXCLUSIVE", "BEGIN DEFERRED"):
        return "BEGIN"
    # The stores' SQL holds no '%' and no '?' inside literals; psycopg wants %s.
    return _PLACEHOLDER.sub("%s", sql)


class ValueRefused(ValueError):
    """Postgres refused a value as data (SQLSTATE class 22, e.g. a NUL character in text, which SQLite takes):
    the caller's value is at fault, not the store, which stays healthy. Nothing was written."""


def is_data_error(exc: BaseException) -> bool:
    """Whether a database error is about the value sent: psycopg's DataError (raised before sending for a NUL in
    text, which has no SQLSTATE) or any SQLSTATE class 22 'data exception' from the server."""
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(exc, psycopg.DataError) or str(getattr(exc, "sqlstate", "") or "").startswith("22")


class PgCursor:
    """A psycopg cursor that takes the stores' SQLite-style SQL."""

    def __init__(self, cur: Any) -> None:
        self._cur = cur

    def execute(self, sql: str, args: Sequence[Any] = ()) -> PgCursor:
        try:
            self._cur.execute(_translate(sql), tuple(args) if args else None)
        except Exception as exc:
            if is_data_error(exc):  # not a DB_ERROR: a store reports no problem for it
                raise ValueRefused(str(exc).strip()) from exc
            raise
        return self

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._cur.fetchall())

    def fetchmany(self, size: int) -> list[Any]:
        return list(self._cur.fetchmany(size))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cur)

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)

    @property
    def description(self) -> list[tuple[str]]:
        return [(c.name,) for c in self._cur.description or ()]

    def close(self) -> None:
        self._cur.close()


class PgConnection:
    """One autocommit psycopg connection per store, reopened after it breaks (a Postgres restart, failover).

    A statement that fails on a broken connection raises (nothing is retried behind the caller's back: the
    store reports the failure like a locked SQLite file); the next statement runs on a fresh connection.
    """

    dialect = "postgres"

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self._psycopg = psycopg
        self._conn = self._connect()
        self._reopen = threading.Lock()

    def _connect(self) -> Any:
        return self._psycopg.connect(self.url, autocommit=True, connect_timeout=10)

    def _live(self) -> Any:
        with self._reopen:
            if self._conn.closed or self._conn.broken:
                self._conn = self._connect()
            return self._conn

    def cursor(self) -> PgCursor:
        return PgCursor(self._live().cursor())

    def execute(self, sql: str, args: Sequence[Any] = ()) -> PgCursor:
        return self.cursor().execute(sql, args)

    def executescript(self, script: str) -> None:
        if script.strip():
            self._live().execute(script)  # several statements, no parameters: one simple query

    @property
    def in_transaction(self) -> bool:
        return self._conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE

    def close(self) -> None:
        self._conn.close()


def connect(url: str, schema: str, table: str) -> PgConnection:
    """A connection with the store's schema in place; replicas starting together create it once.

    The schema is created under a transaction-level advisory lock: concurrent `CREATE ... IF NOT EXISTS` from two
    replicas can otherwise collide in Postgres's catalogs.
    """
    conn = PgConnection(url)
    if schema.strip():
        raw = conn._live()
        with raw.transaction():
            raw.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(f"steward-schema-{table}"),))
            raw.execute(schema)
    return conn


def columns(conn: PgConnection, table: str) -> set[str]:
    rows = conn.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
                        " AND table_name = ?", (table,)).fetchall()
    return {r[0] for r in rows}


def errors() -> tuple[type[BaseException], ...]:
    """psycopg's error base, when psycopg is installed (else nothing extra to catch)."""
    try:
        import psycopg
    except ImportError:
        return ()
    return (psycopg.Error,)
