"""Signed, single-use, expiring approve/deny links for chat cards.

A token is base64url(JSON {a: approval id, d: decision, e: expiry (unix s), n: nonce, r: bound
recipient}) + "." + base64url(HMAC-SHA256(link secret, that JSON)). Holding the link is the
capability (see docs/chatops.md for the threat model); a nonce is spent on first use.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import threading
import urllib.parse
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from agent.records import pg
from agent.records.store import DB_ERRORS, Reopening, StoreUnavailable

MAX_TOKEN_CHARS = 1024  # a real token is about 200 characters
_SCHEMA = "CREATE TABLE IF NOT EXISTS used_links (nonce TEXT PRIMARY KEY, expires INTEGER, by TEXT);"
_PG_SCHEMA = "CREATE TABLE IF NOT EXISTS used_links (nonce TEXT PRIMARY KEY, expires BIGINT, by_whom TEXT);"


class LinkRefused(ValueError):
    """A link that is tampered with, expired or already used."""


class LinkExpired(LinkRefused):
    """A genuine link (its signature holds) past its expiry: `claim` says what it would have answered."""

    def __init__(self, claim: LinkClaim) -> None:
        super().__init__("link expired")
        self.claim = claim


class LinkClaim(BaseModel):
    a: str  # approval id
    d: Literal["approve", "deny"]
    e: int  # expires at, unix seconds (wall clock: the person clicks in real time)
    n: str  # nonce
    r: str = ""  # bound recipient: who the link was sent to; empty = the POST must name an approver


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ApprovalLinks:
    def __init__(self, secret: str, public_url: str, ttl_s: float = 3600.0) -> None:
        if len(secret) < 16:
            raise ValueError("the link secret needs at least 16 characters")
        self._key, self.public_url, self.ttl_s = secret.encode(), public_url.rstrip("/"), ttl_s

    def _mac(self, payload: bytes) -> str:
        return _b64(hmac.new(self._key, payload, hashlib.sha256).digest())

    def token(self, approval_id: str, decision: str, now_s: float, recipient: str = "",
              ttl_s: float | None = None) -> str:
        claim = LinkClaim(a=approval_id, d=decision, e=int(now_s + (ttl_s or self.ttl_s)),  # type: ignore[arg-type]
                          n=secrets.token_urlsafe(12), r=recipient)
        payload = json.dumps(claim.model_dump(), separators=(",", ":"), sort_keys=True).encode()
        return f"{_b64(payload)}.{self._mac(payload)}"

    def url(self, approval_id: str, decision: str, now_s: float, recipient: str = "",
            ttl_s: float | None = None) -> str:
        token = self.token(approval_id, decision, now_s, recipient, ttl_s)
        return f"{self.public_url}/chatops/approve?{urllib.parse.urlencode({'token': token})}"

    def verify(self, token: str, now_s: float) -> LinkClaim:
        """The claim of a genuine, unexpired token (spent or not: see UsedNonces)."""
        if not (token.isascii() and len(token) <= MAX_TOKEN_CHARS):
            raise LinkRefused("malformed link")
        try:
            payload_b64, mac = token.split(".")
            payload = _unb64(payload_b64)
        except ValueError:
            raise LinkRefused("malformed link") from None
        if not hmac.compare_digest(self._mac(payload), mac):
            raise LinkRefused("link signature does not match (tampered or from another server)")
        try:
            claim = LinkClaim.model_validate_json(payload)
        except ValidationError:
            raise LinkRefused("malformed link") from None
        if claim.e <= now_s:
            raise LinkExpired(claim)
        return claim


class UsedNonces(Reopening):
    """Spent link nonces in SQLite (data dir, or memory) or Postgres (STEWARD_DATABASE_URL, shared by every
    replica), so single use survives a restart and holds across replicas.

    A store that cannot be written spends nothing and acts on nothing: StoreUnavailable.
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        location = str(path)
        self.path = pg.redact(location)  # for messages: a Postgres URL without its password
        self._open(location, _SCHEMA, "used_links", wal=False, pg_schema=_PG_SCHEMA)
        self._lock = threading.Lock()

    def is_used(self, nonce: str) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM used_links WHERE nonce = ?", (nonce,)).fetchone() is not None

    def spend(self, claim: LinkClaim, by: str, now_s: float) -> None:
        """Mark the nonce used, atomically; LinkRefused when someone already did."""
        if (problem := self.healthy()) is not None:
            raise StoreUnavailable(problem)
        with self._lock:
            try:
                self._conn.execute("DELETE FROM used_links WHERE expires < ?", (int(now_s) - 86400,))
                cur = self._conn.execute("INSERT INTO used_links VALUES (?,?,?) ON CONFLICT DO NOTHING",
                                         (claim.n, claim.e, by))
            except DB_ERRORS as exc:
                raise self._failed(exc) from exc
            self._worked()
            if cur.rowcount != 1:
                raise LinkRefused("link already used")

    def forget(self, nonce: str) -> None:
        """Give back a nonce whose answer was not taken (the approval store could not be written): the same link
        then works once the store is back. Best effort: a store that cannot be written keeps it spent."""
        with self._lock, contextlib.suppress(*DB_ERRORS):
            self._conn.execute("DELETE FROM used_links WHERE nonce = ?", (nonce,))
