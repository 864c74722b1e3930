"""Shared test helpers: integration tests skip only when a binary is missing and CI is unset."""

from __future__ import annotations

import os
import shutil
import socket

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
