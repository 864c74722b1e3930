"""settle_interrupted now settles an intent dated ahead of its clock (its writer gone), recording the outcome at
its own `now`, which is before the intent. Whether an intent has an outcome is looked up with
`entries(kind="execution", since=intent.at)` (settle_interrupted and _unsettled_intent): the settlement, dated
before the intent, is never found, so the same interrupted stop is settled again at every sweep until the clock
passes the intent, each time as another executed stop (rate limit, circuit breaker, savings count them)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.fault_world import Killed, kill_at
from tests.records_world import JOB, Steward
from tests.skewed_world import Skewed


def test_an_interrupted_stop_dated_ahead_of_the_clock_is_settled_once(tmp_path):
    first = Steward(tmp_path)
    cluster = first.cluster
    kill_at(first.deps.scheduler, "stop_job", after=True)  # dies right after the graceful stop went out
    minute = 0
    with pytest.raises(Killed):
        while minute < 4 * 60:
            minute += 5
            cluster.advance_to(minute * 60)
            first.service.sweep()
    [intent] = [e for e in first.deps.audit.entries(kind="intent", limit=100) if e.action == "terminate"]
    first.close()
    # Restarted a minute later after an NTP step back of 30 minutes.
    cluster.advance_to(cluster.offset_s + 60)
    second = Steward(tmp_path, cluster=cluster)
    second.deps.clock = Skewed(cluster, timedelta(minutes=-30))
    for _ in range(4):
        second.service.sweep()
        cluster.advance_to(cluster.offset_s + 300)
    outcomes = [(e.at.strftime("%H:%M"), e.status, (e.reason or "")[:60])
                for e in second.deps.audit.entries(kind="execution", target=JOB, limit=100, newest_first=False)
                if e.data.get("action_id") == intent.data.get("action_id")]
    second.close()
    assert len(outcomes) == 1, (f"the stop whose intent is dated {intent.at:%H:%M} was settled {len(outcomes)} "
                                f"times: {outcomes}")
