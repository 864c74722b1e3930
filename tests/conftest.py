"""Shared test helpers: integration tests skip only when a binary is missing and CI is unset."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_binary(name: str, *candidates: str) -> str:
    """Path of the binary; skip when it is missing locally, fail under CI=true."""
    for candidate in (name, *candidates):
        path = shutil.which(candidate) or (candidate if os.path.isabs(candidate) and os.access(candidate, os.X_OK)
                                           else None)
        if path:
            return path
    message = f"{name} is not installed (.ci/run installs it)"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def require_module(name: str):
    """Import a Python module; skip when missing locally, fail under CI=true."""
    try:
        return __import__(name)
    except ImportError:
        if in_ci():
            pytest.fail(f"Python module {name} is not installed")
        pytest.skip(f"Python module {name} is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pytest_collection_finish(session):
    """The wheel test's clean venv (minutes of pip) starts building as soon as the test is collected, on a thread
    beside the tests that run before it (tests/test_wheel.py, `prepare_in_background`)."""
    if not any(item.nodeid.startswith("tests/test_wheel.py::") for item in session.items):
        return
    from tests import test_wheel

    root = Path(tempfile.mkdtemp(prefix="steward-wheel-"))
    session.config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))
    test_wheel.prepare_in_background(root)


@pytest.fixture(autouse=True, scope="session")
def _empty_home(tmp_path_factory):
    """Every test sees an empty HOME and XDG dirs, so nothing cached on this machine (a runbook index,
    a data dir, a kubeconfig) can make a test pass here that fails on a fresh one."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIP_CACHE_DIR", os.environ.get("PIP_CACHE_DIR") or os.path.expanduser("~/.cache/pip"))
        mp.setenv("HOME", str(home))
        for var, sub in (("XDG_CACHE_HOME", ".cache"), ("XDG_DATA_HOME", ".local/share"), ("XDG_CONFIG_HOME", ".config")):
            mp.setenv(var, str(home / sub))
        for var in ("STEWARD_DATA_DIR", "STEWARD_POLICY_FILE", "STEWARD_BACKEND", "STEWARD_LLM_BASE_URL", "KUBECONFIG"):
            mp.delenv(var, raising=False)
        yield home


@pytest.fixture(autouse=True)
def _no_network(monkeypatch, request):
    """Unit tests never reach the network: only loopback connections are allowed."""
    real_connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and not (host.startswith("127.") or host in ("localhost", "::1", "") or
                                          host.startswith("/")):
            raise OSError(f"test tried to reach the network: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


def _postgres_bin() -> Path | None:
    """The newest Debian `postgresql` server's bin dir (initdb, pg_ctl), or one on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


@pytest.fixture(scope="session")
def postgres_cluster():
    """A throwaway Postgres cluster in a temp dir, on a unix socket there: yields a URL template with `{db}`.

    initdb refuses root, so under root (CI) the cluster is created and run as `nobody` via runuser.
    """
    bindir = _postgres_bin()
    if bindir is None:
        if in_ci():
            pytest.fail("Postgres (initdb, pg_ctl) is not installed (.ci/run installs the postgresql package)")
        pytest.skip("Postgres (initdb, pg_ctl) is not installed (.ci/run installs the postgresql package)")
    root = Path(tempfile.mkdtemp(prefix="steward-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "nobody", "--"]
        os.chown(root, 65534, 65534)
    data = root / "data"

    def pg(*args: str) -> None:
        subprocess.run([*as_user, *args], check=True, capture_output=True, text=True, timeout=120)

    try:
        pg(str(bindir / "initdb"), "-D", str(data), "-U", "steward", "--auth=trust", "--locale=C", "-E", "UTF8",
           "--no-sync")
        pg(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "-o",
           f"-k {root} -c listen_addresses='' -F -c max_connections=200", "start")
    except subprocess.CalledProcessError as exc:
        log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"could not start Postgres: {exc.stderr or exc.stdout}{log}")
    try:
        yield f"postgresql://steward@/{{db}}?host={root}"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_cluster):
    """A fresh, empty database in the throwaway cluster for one test; dropped after it."""
    psycopg = require_module("psycopg")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = postgres_cluster.format(db="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield postgres_cluster.format(db=name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def fault_world(tmp_path):
    """The fault-injection world (tests/fault_world.py): a loopback Kubernetes API, a clock, a data dir; closed after."""
    from tests.fault_world import World

    w = World(tmp_path)
    yield w
    w.close()
