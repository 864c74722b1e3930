"""The wheel works without the source tree: built, installed into a clean venv outside the repo, swept from there.

A non-editable install finds its prompts, runbooks, example policy, eval scenarios and web
assets as package data. Dependencies come from requirements.lock (the same pins as the README).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.integration


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(bin dir, work dir, env) of a clean venv holding only the lock's packages and the built wheel."""
    root = tmp_path_factory.mktemp("wheel")
    pip_env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env = {**pip_env, "STEWARD_DATA_DIR": str(root / "data"), "HOME": str(root / "home")}
    dist = root / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)], root, pip_env)
    wheel = next(dist.glob("gpu_steward-*.whl"))
    venv.EnvBuilder(with_pip=True, clear=True).create(root / "venv")
    bin_dir = root / "venv" / "bin"
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q"]
    # As the README installs it: the complete lock as it is, then `pip check` that its pins agree.
    _run([*pip, "--no-deps", "-r", str(REPO / "requirements.lock")], root, pip_env)
    _run([*pip, "--no-deps", str(wheel)], root, pip_env)
    _run([str(bin_dir / "python"), "-m", "pip", "check"], root, pip_env)
    work = root / "elsewhere"
    work.mkdir()
    return wheel, bin_dir, work, env


def test_wheel_ships_the_package_data(installed):
    wheel, *_ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("agent/assets/prompts/notify_warning.zh.md", "agent/assets/runbooks/idle-gpu-job.md",
                   "agent/assets/policy.example.yaml", "agent/web/index.html", "sim/demo.yaml",
                   "evals/scenarios/idle-notebook.yaml", "evals/policies/dry-run-mode.yaml",
                   "evals/retrieval_queries.yaml"):
        assert needed in names, f"{needed} missing from {wheel.name}"
    assert not any(n.startswith(("tests/", "prompts/", "runbooks/")) for n in names)


def test_installed_wheel_sweeps_and_searches_outside_the_repo(installed):
    _, bin_dir, work, env = installed
    steward = str(bin_dir / "steward")
    # The installed code is the wheel's, not the checkout's.
    where = _run([str(bin_dir / "python"), "-c", "import agent; print(agent.__file__)"], work, env).stdout
    assert str(REPO) not in where and "site-packages" in where

    sweep = _run([steward, "sweep", "--lang", "zh"], work, env).stdout
    assert "PromptError" not in sweep
    assert "idle-gpu-job" in sweep  # findings cite the shipped runbooks
    assert "警告" in sweep or "通知" in sweep  # a warning, rendered from the shipped Chinese template

    # Ranking quality is the retrieval eval's job (tests/test_runbooks.py); here: the shipped index answers.
    found = _run([steward, "runbooks", "search", "有人占着卡不用", "--kind", "idle"], work, env).stdout
    assert "idle-gpu-job" in found.splitlines()[0]
    shipped = len(list((REPO / "runbooks").glob("*.md")))
    assert f"{shipped} runbook files" in _run([steward, "runbooks", "check"], work, env).stdout

    example = _run([steward, "policy", "example"], work, env).stdout
    (work / "policy.yaml").write_text(example, encoding="utf-8")
    assert "ok" in _run([steward, "policy", "check", "policy.yaml"], work, env).stdout
