"""A keep dated ahead of the sweeper's clock (a replica 30 minutes ahead, or a step back) now counts in
History.keeps (audit.history no longer drops it), and so does its time for keep_answered_at. Revoked on this host
(the revocation counts: it is dated at or before now), the keep no longer protects, but its grant time still lies
ahead: the policy model finds every warning older than the keep (stale) and the duplicate rule lets a new one through
(`after = max(..., kept)`), while warning_first never counts them (oldest = kept). The owner is warned at every
sweep until the clock reaches the keep's timestamp, and the stop cannot come."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from agent.chatops.commands import KeepRequest, grant_keep
from tests.records_world import JOB, Steward
from tests.skewed_world import Skewed


def _warnings(deps):
    return [e for e in deps.audit.entries(kind="execution", target=JOB, status="executed", limit=500,
                                          newest_first=False) if e.action == "notify"]


def test_a_revoked_keep_dated_ahead_does_not_have_the_owner_warned_at_every_sweep(tmp_path):
    steward = Steward(tmp_path)
    cluster, deps = steward.cluster, steward.deps
    while not _warnings(deps):
        steward.sweep(5)
    steward.sweep(10)
    ahead = dataclasses.replace(deps, clock=Skewed(cluster, timedelta(minutes=40)))
    reply = grant_keep(ahead, KeepRequest(seconds=3600, duration="1h", job=JOB, words=["eval"]),
                       user="bob", approver=False, by="chatops:bob", run_id="chat", lang="en")
    assert reply.startswith("OK"), reply
    [grant] = deps.audit.entries(kind="exemption", status="granted", limit=10)
    # An approver revokes it on this host (POST /api/exemptions/revoke does exactly this).
    now = deps.clock.now()
    deps.audit.record("exemption", at=now, run_id="api", target=JOB, status="revoked", reason="revoked",
                      data={"until": now.isoformat(), "by": "lead", "revokes": [grant.seq]})
    before = len(_warnings(deps))
    for _ in range(6):  # 30 minutes of sweeps, every 5 minutes
        steward.sweep(5)
    sent = _warnings(deps)[before:]
    steward.close()
    assert len(sent) <= 1, (f"{len(sent)} warnings in 30 minutes (policy: at most one per "
                            f"{deps.policy.warning.repeat_every / 3600:.0f} h): "
                            f"{[e.at.strftime('%H:%M') for e in sent]}")
