"""Read views from a snapshot: built once per sweep and audit state, rebuilt after any change, never stale."""

from __future__ import annotations

import threading
import time

import pytest

from agent.api.snapshot import Snapshots
from tests.test_server_api import client_for, settings_for, sweep_with_approval


def test_findings_and_approvals_are_built_once_per_state_and_rebuilt_after_a_change(tmp_path):
    with client_for(settings_for(tmp_path)) as client:
        snaps: Snapshots = client.app.state.runtime.snapshots
        approval_id = sweep_with_approval(client)
        first = client.get("/api/findings").json()
        builds = snaps.builds
        for _ in range(5):
            assert client.get("/api/findings").json() == first
        assert snaps.builds == builds  # the same state: the same bytes, nothing recomputed
        pending = client.get("/api/approvals").json()["pending"]
        assert [a["id"] for a in pending] == [approval_id]
        # An answer is audited: the next read sees it at once.
        answer = client.post(f"/api/approvals/{approval_id}", json={"decision": "deny", "reason": "busy week"})
        assert answer.status_code == 200, answer.text
        after = client.get("/api/approvals").json()
        assert after["pending"] == [] and after["recent"][0]["id"] == approval_id
        assert after["recent"][0]["status"] == "denied"
        # The zh page is its own view of the same state.
        zh = client.get("/api/findings?lang=zh").json()
        assert [f["target"] for f in zh["findings"]] == [f["target"] for f in first["findings"]]


def test_concurrent_readers_of_one_state_build_it_once():
    class Runtime:
        latest = None

        class deps:  # noqa: N801 - the attribute path the snapshots read
            class audit:  # noqa: N801
                @staticmethod
                def last_seq() -> int:
                    return 7

    snaps = Snapshots(Runtime())  # type: ignore[arg-type]
    calls = []

    def build() -> bytes:
        calls.append(1)
        time.sleep(0.05)  # long enough for every reader to arrive while it builds
        return b'{"ok":true}'

    bodies: list[bytes] = []
    threads = [threading.Thread(target=lambda: bodies.append(snaps.body("v", (), build))) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and bodies == [b'{"ok":true}'] * 20
    assert snaps.builds == 1 and snaps.hits == 19


def test_a_failed_build_is_not_cached_and_the_next_reader_builds_again():
    class Runtime:
        latest = None

        class deps:  # noqa: N801
            class audit:  # noqa: N801
                @staticmethod
                def last_seq() -> None:
                    return None

    snaps = Snapshots(Runtime())  # type: ignore[arg-type]

    def broken() -> bytes:
        raise RuntimeError("store down")

    with pytest.raises(RuntimeError, match="store down"):
        snaps.body("v", (), broken)
    assert snaps.body("v", (), lambda: b"[]") == b"[]" and snaps.builds == 1
