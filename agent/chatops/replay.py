"""Short-lived memory of callback nonces so a captured request cannot be played again."""

from __future__ import annotations

import threading
from collections import OrderedDict


class NonceCache:
    """Remembers (key, seen_at) for `ttl_s`; beyond that, timestamps are refused as stale anyway."""

    def __init__(self, ttl_s: float = 600.0, max_entries: int = 100_000) -> None:
        self.ttl_s, self.max_entries = ttl_s, max_entries
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def first_use(self, key: str, now_s: float) -> bool:
        """True the first time `key` is seen within the ttl; False for a replay."""
        with self._lock:
            while self._seen and (next(iter(self._seen.values())) < now_s - self.ttl_s
                                  or len(self._seen) >= self.max_entries):
                self._seen.popitem(last=False)
            if key in self._seen:
                return False
            self._seen[key] = now_s
            return True
