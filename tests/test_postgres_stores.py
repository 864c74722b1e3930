"""The shared stores behave the same on SQLite (the embedded default) and on a real Postgres (STEWARD_DATABASE_URL):
the audit hash chain and its verification, append-only enforcement, approvals answered exactly once and kept
across a restart, and the sweeper lease. "Two replicas" here are two store objects with their own connections to
one database, as two processes would have."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.records.approvals import ApprovalError, ApprovalStore
from agent.records.audit import AuditLog
from agent.records.store import DB_ERROR, READONLY, StoreUnavailable
from agent.scheduling.leases import SqliteLease

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path) -> Callable[[str], str]:
    """Where the store called `name` lives: a file in the data dir, or the one Postgres database."""
    if request.param == "sqlite":
        return lambda name: str(tmp_path / f"{name}.sqlite")
    url = request.getfixturevalue("postgres_url")
    return lambda name: url


def _raw(location: str) -> Any:
    """A connection of our own, around the steward (an operator with psql or sqlite3)."""
    if location.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(location, autocommit=True)
    return sqlite3.connect(location, isolation_level=None)


def _record(log: AuditLog, n: int, run: str = "r1") -> None:
    for i in range(n):
        log.record("finding", at=T0 + timedelta(minutes=i), run_id=run, target=f"ml/job-{i}", level=1,
                   status="open", reason=f"idle {i} 空闲", data={"gpus": i, "proposal_key": f"k{i}"})


def test_the_chain_verifies_and_survives_a_restart(where):
    log = AuditLog(where("audit"))
    _record(log, 5)
    head = log.head()
    assert head is not None and head.seq == 5
    assert log.verify().ok, log.verify().describe()
    assert log.exists(kind="finding", status="open", proposal_key="k3")
    assert not log.exists(kind="finding", status="open", proposal_key="k9")
    assert [e.target for e in log.entries(since=T0 + timedelta(minutes=3), newest_first=False)] == \
        ["ml/job-3", "ml/job-4"]
    log.close()
    again = AuditLog(where("audit"))  # a restart, or another replica
    assert again.head() == head
    assert again.verify(expect_head=head).ok
    assert again.entries(limit=1)[0].reason == "idle 4 空闲"


def test_updates_and_deletes_are_refused_and_a_bypass_is_named(where):
    location = where("audit")
    log = AuditLog(location)
    _record(log, 3)
    raw = _raw(location)
    postgres = location.startswith("postgresql://")
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    if postgres:
        import psycopg

        errors = (psycopg.Error,)
    for sql in ("UPDATE audit SET reason = 'nothing happened' WHERE seq = 2", "DELETE FROM audit WHERE seq = 3",
                *(["TRUNCATE audit"] if postgres else [])):
        with pytest.raises(errors, match="append-only"):
            raw.execute(sql)
    assert log.count() == 3
    # Around the triggers (the table's owner can): verify names the trigger and the edited entry.
    raw.execute("ALTER TABLE audit DISABLE TRIGGER audit_no_update" if postgres else "DROP TRIGGER audit_no_update")
    raw.execute("UPDATE audit SET reason = 'nothing happened' WHERE seq = 2")
    result = log.verify()
    assert not result.ok
    assert result.bad_seq == 2 and "edited" in result.problem
    assert any("audit_no_update" in note for note in result.notes)
    raw.close()


def test_two_writers_never_fork_the_chain(where):
    logs = [AuditLog(where("audit")) for _ in range(2)]  # two replicas: own connections, one log
    barrier = threading.Barrier(2)

    def write(log: AuditLog, run: str) -> None:
        barrier.wait()
        _record(log, 40, run)

    threads = [threading.Thread(target=write, args=(log, f"replica-{i}")) for i, log in enumerate(logs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result = logs[0].verify()
    assert result.ok, result.describe()
    assert result.entries == 80 and result.head is not None and result.head.seq == 80
    assert {e.run_id for e in logs[1].entries(limit=100)} == {"replica-0", "replica-1"}


def _request(store: ApprovalStore) -> str:
    return store.request(proposal_key="force_terminate:ml/x", target="ml/x", action="force_terminate", level=3,
                         now=T0, expire_after_s=3600, payload={"gpus": 8}, run_id="r1").id


def test_an_approval_is_answered_exactly_once_across_replicas(where):
    a_log, b_log = AuditLog(where("audit")), AuditLog(where("audit"))
    a, b = ApprovalStore(where("approvals"), a_log), ApprovalStore(where("approvals"), b_log)
    b.holder = "replica-b"
    approval_id = _request(a)
    assert b.get(approval_id) is not None and b.find_pending("force_terminate:ml/x") is not None
    outcomes: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def answer(store: ApprovalStore, decision: Any, by: str) -> None:
        barrier.wait()
        try:
            store.answer(approval_id, decision=decision, by=by, reason="", now=T0 + timedelta(minutes=5), run_id="r")
            outcomes[by] = "taken"
        except ApprovalError as exc:
            outcomes[by] = str(exc)

    threads = [threading.Thread(target=answer, args=(a, "approve", "ann")),
               threading.Thread(target=answer, args=(b, "deny", "bo"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [who for who, what in outcomes.items() if what == "taken"]
    assert len(winners) == 1, outcomes
    loser = "bo" if winners == ["ann"] else "ann"
    assert "already" in outcomes[loser]
    final = a.get(approval_id)
    assert final is not None and final.answered_by == winners[0]
    assert final.status == ("approved" if winners == ["ann"] else "denied")
    refused = a_log.entries(kind="approval", status="refused_answer")
    assert len(refused) == 1 and refused[0].data["approval_id"] == approval_id


def test_an_answer_is_kept_across_a_restart_and_completed_once(where):
    log = AuditLog(where("audit"))
    first = ApprovalStore(where("approvals"), log)
    first.holder = "replica-a"
    approval_id = _request(first)
    first.answer(approval_id, decision="approve", by="ann", reason="ok", now=T0 + timedelta(minutes=1), run_id="r")
    # replica-a dies before auditing the answer and resuming the graph; replica-b starts.
    other = ApprovalStore(where("approvals"), AuditLog(where("audit")))
    other.holder = "replica-b"
    assert [x.id for x in other.incomplete()] == [approval_id]
    assert not other.claim(approval_id)  # replica-a's claim has not lapsed
    assert first.claim(approval_id)  # its own host takes it back at once
    first.release(approval_id)
    assert other.claim(approval_id)
    other.audit_answer(other.get(approval_id))  # type: ignore[arg-type]
    other.audit_answer(other.get(approval_id))  # type: ignore[arg-type]  # once only
    other.mark_completed(approval_id, T0 + timedelta(minutes=2))
    assert other.incomplete() == [] and first.incomplete() == []
    assert len(log.entries(kind="approval", status="approved")) == 1
    assert log.verify().ok


def test_one_lease_holder_until_it_stops_renewing(where):
    now = [1000.0]
    a = SqliteLease(where("leases"), "sweeper", "replica-a", duration_s=30, clock=lambda: now[0])
    b = SqliteLease(where("leases"), "sweeper", "replica-b", duration_s=30, clock=lambda: now[0])
    assert a.acquire() and not b.acquire()
    now[0] += 20
    assert a.acquire() and not b.acquire()  # renewed
    assert b.current_holder() == "replica-a"
    now[0] += 31  # replica-a stopped renewing (killed, hung, cut off)
    assert b.acquire() and not a.acquire()
    b.release()
    assert a.acquire()


def test_the_postgres_lease_runs_on_the_database_clock(postgres_url):
    a = SqliteLease(postgres_url, "sweeper", "replica-a", duration_s=3600)
    b = SqliteLease(postgres_url, "sweeper", "replica-b", duration_s=3600)
    assert a.acquire() and not b.acquire()
    gone = SqliteLease(postgres_url, "other", "replica-a", duration_s=0)  # expires as soon as it is taken
    assert gone.acquire()
    assert SqliteLease(postgres_url, "other", "replica-b", duration_s=0).acquire()


def test_an_unreachable_database_degrades_and_hides_its_password(tmp_path):
    pytest.importorskip("psycopg")
    url = f"postgresql://steward:s3cret@/steward?host={tmp_path}&connect_timeout=2"  # no server on that socket
    log = AuditLog(url)
    (problem,) = log.problems()
    assert problem.reason == DB_ERROR
    assert "s3cret" not in problem.detail and "steward:***@" in problem.detail
    with pytest.raises(StoreUnavailable):
        log.record("finding", at=T0, run_id="r")
    lease = SqliteLease(url, "sweeper", "replica-a")
    assert lease.problem is not None and not lease.acquire()
    with pytest.raises(FileNotFoundError, match="steward:\\*\\*\\*@"):
        AuditLog(url, readonly=True)


def test_a_readonly_open_of_postgres_reads_the_log(postgres_url):
    _record(AuditLog(postgres_url), 2)
    reader = AuditLog(postgres_url, readonly=True)
    assert reader.problems()[0].reason == READONLY
    assert reader.verify().ok and reader.count() == 2
    with pytest.raises(StoreUnavailable):
        reader.record("finding", at=T0, run_id="r")


def test_graph_checkpoints_in_postgres_are_shared_by_replicas(postgres_url):
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    from agent.api.build import postgres_checkpointer

    class State(TypedDict):
        answer: str

    def ask(state: State) -> State:
        return {"answer": interrupt("approve?")}

    def build(saver: Any) -> Any:
        graph = StateGraph(State)
        graph.add_node("ask", ask)
        graph.add_edge(START, "ask")
        graph.add_edge("ask", END)
        return graph.compile(checkpointer=saver)

    config = {"configurable": {"thread_id": "sweep-1"}}
    first = build(postgres_checkpointer(postgres_url))
    first.invoke({"answer": ""}, config)
    assert first.get_state(config).next == ("ask",)
    second = build(postgres_checkpointer(postgres_url))  # another replica resumes the waiting graph
    assert second.invoke(Command(resume="approved"), config) == {"answer": "approved"}
    assert first.get_state(config).next == ()


def test_replicas_starting_together_set_up_the_checkpoints_without_waiting_on_each_other(postgres_url):
    # The checkpoint migrations CREATE INDEX CONCURRENTLY, which waits for every older snapshot: a replica blocked
    # in pg_advisory_lock holds one, so a blocking lock wait there hung both replicas for ever.
    from agent.api.build import postgres_checkpointer

    done: list[Any] = []
    starters = [threading.Thread(target=lambda: done.append(postgres_checkpointer(postgres_url)), daemon=True)
                for _ in range(3)]
    for t in starters:
        t.start()
    for t in starters:
        t.join(60)
    assert len(done) == 3


def test_the_change_store_marks_when_sweeps_began_on_either_store(where):
    from agent.records.changes import ChangeStore

    store = ChangeStore(where("changes"))
    store.mark_observing(T0)
    store.mark_observing(T0 + timedelta(hours=1))  # kept from the first call
    assert store.observing_since() == T0 and store.problems() == []
