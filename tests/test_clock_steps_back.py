"""The host clock steps back (an NTP correction) between two sweeps: the steward's own recent actions are dated
"in the future" and must still count for the rate limit and the circuit breaker (AuditLog.history keeps them;
agent/guardrail/case.py last_hour counts them), and a warning dated ahead of the clock licenses no stop."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from agent.config.policy import parse_policy
from agent.guardrail.decide import Facts, decide
from agent.records.audit import AuditLog
from core.actions import Finding, ProposedAction
from core.cluster import JobInfo
from tests.fault_world import IDLE, SCENARIO, World

T = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def job(name, uid):
    return JobInfo(id=f"ml/{name}", uid=uid, scheduler="kubernetes", namespace="ml", name=name, user="u", gpus=2)


def idle(name):
    return [Finding(kind="idle", target=f"ml/{name}", since=T - timedelta(hours=3), detected_at=T, evidence="0%")]


def record(audit, kind, at, target, action, status, **data):
    audit.record(kind, at=at, run_id="r1", target=target, action=action, level=2, status=status, reason="x",
                 data=data)


def setup(tmp_path, failures=False):
    audit = AuditLog(tmp_path / "audit.sqlite")
    for name, uid in (("a", "uid-a"), ("b", "uid-b")):
        w = T - timedelta(hours=1, minutes=10)
        record(audit, "execution", w, f"ml/{name}", "notify", "executed", finding_kind="idle", target_uid=uid,
               deadline=(w + timedelta(minutes=30)).isoformat())
    # 12:00: job a is stopped (the one stop per hour the policy allows)
    status = "failed" if failures else "executed"
    record(audit, "execution", T, "ml/a", "terminate", status, finding_kind="idle", target_uid="uid-a", gpus=2)
    return audit


def stop_b_refused_by(rule: str, audit: AuditLog, policy) -> None:
    """A stop of job b a minute after job a's, and again after the clock stepped back 3 minutes (a's stop at 12:00
    now dated in the future): refused by `rule` both times."""
    p = ProposedAction(action="terminate", target="ml/b", finding_kind="idle", target_uid="uid-b")
    for now in (T + timedelta(minutes=1), T - timedelta(minutes=3)):
        d = decide(p, Facts(now=now, job=job("b", "uid-b"), findings=idle("b")), policy, audit.history(now))
        assert d.rule == rule, (now, d)


def test_rate_limit_holds_after_clock_steps_back(tmp_path):
    stop_b_refused_by("rate_limit", setup(tmp_path), parse_policy({"rate_limits": {"stops_per_hour": 1}}, "t"))


def test_circuit_breaker_holds_after_clock_steps_back(tmp_path):
    audit = setup(tmp_path, failures=True)
    for i in range(1, 3):
        record(audit, "execution", T + timedelta(seconds=i), "ml/a", "terminate", "failed", finding_kind="idle",
               target_uid="uid-a")
    stop_b_refused_by("circuit_breaker", audit, parse_policy({}, "t"))


class Skewed:
    def __init__(self, clock, by):
        self.clock, self.by = clock, by

    def now(self):
        return self.clock.now() + self.by


@pytest.fixture
def world(tmp_path):
    sc = copy.deepcopy(SCENARIO)
    sc["pools"][0]["nodes"] = 2
    sc["jobs"].append({"id": "ml/idle-notebook-2", "user": "bob", "gpus": 2, "node": "a100-1", "phases": IDLE})
    w = World(tmp_path, sc, parse_policy({"warning": {"min_notice": "30m"}, "rate_limits": {"stops_per_hour": 1}},
                                         "t"))
    yield w
    w.close()


def evicted(world):
    return sorted({p.split("/")[6] for _, p, _ in world.api.calls("POST", "/eviction")})


def test_rate_limit_survives_ntp_step_back(world):
    s = world.service()
    world.at(80)
    s.sweep()
    world.at(112)
    s.sweep()
    assert len(evicted(world)) == 1, evicted(world)
    world.at(114)
    s2 = world.service()
    s2.deps.clock = Skewed(world.cluster, timedelta(minutes=-3))
    r = s2.sweep()
    rules = {d["proposal"]["target"]: d["decision"]["rule"] for d in r.state["decisions"]
             if d["proposal"]["action"] == "terminate"}
    assert "rate_limit" in rules.values(), rules
    assert len(evicted(world)) == 1, f"second stop within 2 minutes despite stops_per_hour=1: {evicted(world)}"


def test_a_warning_dated_ahead_of_the_clock_licenses_no_stop(tmp_path):
    audit = AuditLog(tmp_path / "audit.sqlite")
    sent = T + timedelta(minutes=2)  # sent, then the clock stepped back 3 minutes
    record(audit, "execution", sent, "ml/c", "notify", "executed", finding_kind="idle", target_uid="uid-c",
           deadline=(sent + timedelta(hours=1)).isoformat())
    p = ProposedAction(action="terminate", target="ml/c", finding_kind="idle", target_uid="uid-c")
    for now in (T - timedelta(minutes=1), T + timedelta(minutes=30)):
        d = decide(p, Facts(now=now, job=job("c", "uid-c"), findings=idle("c")), parse_policy({}, "t"),
                   audit.history(now))
        assert d.verdict != "allow", d
    later = sent + timedelta(hours=1, minutes=1)
    d = decide(p, Facts(now=later, job=job("c", "uid-c"), findings=idle("c")), parse_policy({}, "t"),
               audit.history(later))
    assert d.verdict == "allow", d
