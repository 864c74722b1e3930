"""The wheel works without the source tree: built, installed into a clean venv outside the repo, swept from there.

A non-editable install finds its prompts, runbooks, example policy, eval scenarios and web
assets as package data. Dependencies come from requirements.lock (the same pins as the README).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
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


class _Preparation:
    """The clean venv, built on a thread of its own from collection time on (see `prepare_in_background`): building
    the wheel and installing the lock into a fresh venv is minutes of pip, mostly unpacking and disk, and it runs
    beside the tests collected before this module instead of after them. Nothing is shared: the venv is this
    module's alone, and a failure is raised in the test that needs it."""

    def __init__(self, root: Path, pip_env: dict[str, str]) -> None:
        self.root, self.pip_env = root, pip_env
        self.result: tuple[Path, Path] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="wheel-venv", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = _build_and_install(self.root, self.pip_env)
        except BaseException as exc:  # noqa: BLE001 - handed to the test that needs the venv
            self.error = exc

    def wait(self) -> tuple[Path, Path]:
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


_PREPARED: _Preparation | None = None


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "VIRTUAL_ENV", "PYTHONPATH"))}


def prepare_in_background(root: Path) -> None:
    """Start building the clean venv under `root` (called by tests/conftest.py once this module is collected)."""
    global _PREPARED
    if _PREPARED is None:
        _PREPARED = _Preparation(root, _clean_env())


def _build_and_install(root: Path, pip_env: dict[str, str]) -> tuple[Path, Path]:
    """(the wheel, the venv's bin dir): the wheel built from the checkout, the lock and the wheel installed."""
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
    return wheel, bin_dir


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, bin dir, work dir, env) of a clean venv holding only the lock's packages and the built wheel."""
    root = tmp_path_factory.mktemp("wheel")
    env = {**_clean_env(), "STEWARD_DATA_DIR": str(root / "data"), "HOME": str(root / "home")}
    if _PREPARED is not None:
        wheel, bin_dir = _PREPARED.wait()
    else:  # run without the conftest hook (a single file from another rootdir): build it now
        build = root / "build"
        build.mkdir()
        wheel, bin_dir = _build_and_install(build, _clean_env())
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
