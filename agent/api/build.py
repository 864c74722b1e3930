"""Builds the runtime from settings: the simulated demo cluster by default, stores under the data dir."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from typing import Any

from agent.api.runtime import SimClock, StewardRuntime
from agent.config.settings import Settings
from agent.graph.digest import DigestSchedule
from agent.graph.service import SweepService
from agent.scheduling.leases import AlwaysLeader, LeaderLease, SqliteLease
from agent.scheduling.scheduler import SweepSchedule

log = logging.getLogger("steward.build")


def make_lease(settings: Settings) -> LeaderLease:
    """leader_lock=auto: the Kubernetes Lease in a pod or wherever the backend is Kubernetes (every steward sweeping
    one cluster takes the cluster's Lease, whatever its data dir), else a row lease in the store: Postgres or the
    data dir."""
    from agent.scheduling.k8s_lease import cluster_lease, in_cluster

    holder = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    choice = settings.leader_lock
    if choice == "none":
        return AlwaysLeader(holder)
    if choice == "kubernetes" or (choice == "auto" and (in_cluster() or settings.backend == "kubernetes")):
        return cluster_lease(settings, holder)
    if choice not in ("auto", "sqlite", "postgres"):
        raise ValueError(f"STEWARD_LEADER_LOCK must be auto, sqlite, postgres, kubernetes or none, not {choice!r}")
    if choice == "postgres" and settings.database_url is None:
        raise ValueError("STEWARD_LEADER_LOCK=postgres needs STEWARD_DATABASE_URL")
    where = str(settings.data_dir / "leases.sqlite") if choice == "sqlite" else settings.store("leases")
    return SqliteLease(where, settings.lease_name, holder, settings.lease_duration_s)


def checkpointer(settings: Settings) -> Any:
    """The graph's durable checkpoints in the data dir; read-only when it cannot be written (nothing sweeps then).

    With STEWARD_DATABASE_URL: in Postgres (langgraph-checkpoint-postgres), so a graph waiting on an approval
    resumes on whichever replica holds the sweep.
    """
    if settings.database_url is not None:
        return postgres_checkpointer(settings.database_url.get_secret_value())
    from langgraph.checkpoint.sqlite import SqliteSaver

    from agent.records.store import open_store

    conn, problem = open_store(str(settings.checkpoint_db), "", "checkpoints", wal=False, autocommit=False)
    if problem is not None:
        log.warning("graph checkpoints: %s", problem.detail)
    return SqliteSaver(conn)


def postgres_checkpointer(url: str) -> Any:
    """A PostgresSaver on a small connection pool (reconnects after a database restart); its tables created once.

    Replicas starting together run the saver's migrations one at a time, under a session advisory lock. It is
    waited for with pg_try_advisory_lock, never a blocking pg_advisory_lock: the migrations CREATE INDEX
    CONCURRENTLY, which waits for every statement with an older snapshot, a blocked lock wait included, so two
    replicas starting together would wait on each other for ever (tests/test_failover.py starts two).
    """
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import connect
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
    except ImportError as exc:
        raise ValueError("STEWARD_DATABASE_URL needs the postgres extra: pip install 'gpu-steward[postgres]'") from exc
    from agent.records.pg import lock_key

    pool = ConnectionPool(url, min_size=1, max_size=4, open=True, check=ConnectionPool.check_connection,
                          kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
    saver = PostgresSaver(pool)  # type: ignore[arg-type]
    with connect(url, autocommit=True) as guard:
        key = lock_key("steward-checkpoint-setup")
        while not guard.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.2)
        saver.setup()  # the lock is released when `guard` closes
    return saver


def schedule_of(settings: Settings) -> SweepSchedule:
    return SweepSchedule(every_s=settings.sweep_every_s, cron=settings.sweep_cron)


def simulated_runtime(settings: Settings, *, speed: float | None = None, start_s: float | None = None,
                      notifier: Any = None, chat_model: Any = None) -> StewardRuntime:
    """The built-in demo (or settings.scenario) on a simulated clock, resuming where a restart left it."""
    from agent.config.policy import load_policy
    from agent.wiring import make_planner, simulated_deps
    from sim.scenario import demo_scenario_path, load_scenario

    data_dir = settings.ensure_data_dir()
    scenario = load_scenario(settings.scenario or demo_scenario_path())
    deps, cluster = simulated_deps(scenario, load_policy(settings.policy_file), make_planner(settings),
                                   data_dir=data_dir, language=settings.language,
                                   database_url=settings.store("audit") if settings.database_url else None)
    if notifier is not None:
        deps.notifier = notifier
    from agent.retrieval.index import runbooks_from_settings

    runbooks_from_settings(deps, settings)
    service = SweepService(deps, checkpointer=checkpointer(settings), run_prefix=scenario.name)
    state_file = data_dir / "sim-clock.json"
    start = SimClock.resume_offset(state_file, scenario.name, start_s or 0.0)
    if start > (start_s or 0.0):
        log.warning("%s continues at %.0f min, as saved in %s (a saved clock later than --start wins)%s; to play "
                    "it from the start, remove that file or use a fresh --data-dir", scenario.name, start / 60,
                    state_file, ": it has ended, so the clock stands still" if start >= scenario.duration else "")
    restore_actions(cluster, deps.audit, scenario.name, min(start, scenario.duration))
    cluster.advance_to(min(start, scenario.duration))
    clock = SimClock(cluster, settings.sim_speed if speed is None else speed, start, state_file)
    if chat_model is None and settings.llm_configured:
        from agent.planning.llm_planner import make_chat_model

        chat_model = make_chat_model(settings)
    rt = StewardRuntime(service, schedule_of(settings), sim_clock=clock, lease=make_lease(settings),
                        chat_model=chat_model)
    rt.chat_bounds = _chat_bounds(settings)
    rt.digest = digest_of(settings)
    rt.zone = settings.zone()
    return rt


RESTORED = ("terminate", "force_terminate", "resize_pool")


def restore_actions(cluster: Any, audit: Any, scenario: str, upto_s: float) -> int:
    """The stops and resizes the steward carried out on this scenario before a restart, carried out again at their
    own times: the simulated cluster is rebuilt from its scenario, and without them a job the steward stopped
    would run again and a pool it shrank would be whole, as no real cluster would show. How many were."""
    # An action a human approved runs under the approval's id: this scenario's when a sweep of it asked.
    asked = {str(e.data.get("approval_id")) for e in audit.entries(kind="approval", status="pending", limit=100_000)
             if str(e.run_id or "").startswith(scenario) and e.data.get("approval_id")}
    done = 0
    for e in audit.entries(kind="execution", status="executed", limit=100_000, newest_first=False):
        run = str(e.run_id or "")
        if e.action not in RESTORED or not e.target or not (run.startswith(scenario) or run in asked):
            continue
        at = cluster.offset_of(e.at)
        if at < 0 or at > upto_s:
            continue
        cluster.advance_to(max(at, cluster.offset_s))
        if e.action == "resize_pool" and e.data.get("target_nodes") is not None:
            cluster.resize_pool(e.target, int(e.data["target_nodes"]), reason="restored after a restart")
        elif e.action != "resize_pool":
            cluster.stop_job(e.target, force=e.action == "force_terminate", uid=e.data.get("target_uid"),
                             reason="restored after a restart")
        done += 1
    return done


def cluster_runtime(settings: Settings, *, chat_model: Any = None) -> StewardRuntime:
    """A real cluster (STEWARD_BACKEND=kubernetes|slurm) on the wall clock; stores under the data dir."""
    from agent.config.policy import load_policy
    from agent.retrieval.index import runbooks_from_settings
    from agent.wiring import cluster_deps, make_planner

    deps = cluster_deps(settings, load_policy(settings.policy_file), make_planner(settings))
    runbooks_from_settings(deps, settings)
    service = SweepService(deps, checkpointer=checkpointer(settings), run_prefix=settings.backend)
    if chat_model is None and settings.llm_configured:
        from agent.planning.llm_planner import make_chat_model

        chat_model = make_chat_model(settings)
    rt = StewardRuntime(service, schedule_of(settings), lease=make_lease(settings), chat_model=chat_model)
    rt.chat_bounds = _chat_bounds(settings)
    rt.digest = digest_of(settings)
    rt.zone = settings.zone()
    return rt


def digest_of(settings: Settings) -> DigestSchedule | None:
    """The scheduled cost digest (STEWARD_DIGEST_CRON), or None when it is not set."""
    if not settings.digest_cron:
        return None
    return DigestSchedule(settings.digest_cron, language=settings.language, zone=settings.zone())


def _chat_bounds(settings: Settings) -> dict[str, int]:
    return {"max_tool_calls_per_turn": settings.llm_max_tool_calls_per_turn,
            "max_tool_args_bytes": settings.llm_max_tool_args_bytes}


def fast_forward(runtime: StewardRuntime, until_s: float, every_s: float = 300.0) -> None:
    """Sweep a simulated cluster at each interval up to `until_s` at once (demos, screenshots, tests)."""
    clock = runtime.sim_clock
    if clock is None:
        raise ValueError("fast_forward needs a simulated cluster")
    t = clock.cluster.offset_s
    while t + every_s <= until_s:
        t += every_s
        with runtime.graph_lock:
            clock.cluster.advance_to(t)
        runtime.sweep_now("replay")
    clock.restart_from(t)
