"""Runs Slurm's command-line tools (squeue, scontrol, scancel, sacct): argument lists, timeouts, clear errors."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

SLURM_TOOLS = frozenset({"squeue", "scontrol", "scancel", "sacct", "sinfo"})


class SlurmError(RuntimeError):
    """A Slurm command failed or timed out; the message quotes the exact command and its stderr."""

    def __init__(self, command: list[str], message: str, returncode: int | None = None, stderr: str = "") -> None:
        self.command = command
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"`{' '.join(command)}` {message}")


class SlurmCli:
    """One place that starts Slurm processes; `calls` records every command run (tool name first)."""

    def __init__(
        self,
        bin_dir: str | Path | None = None,
        *,
        timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.bin_dir = Path(bin_dir) if bin_dir else None
        if self.bin_dir is not None and not self.bin_dir.is_dir():
            raise ValueError(f"slurm_bin_dir {self.bin_dir} is not a directory")
        self.timeout_s = timeout_s
        self.env = dict(env) if env is not None else None
        self.calls: list[tuple[str, ...]] = []

    def _binary(self, tool: str) -> str:
        if tool not in SLURM_TOOLS:
            raise ValueError(f"not a Slurm tool this adapter runs: {tool!r}")
        if self.bin_dir is not None:
            return str(self.bin_dir / tool)
        path = self.env.get("PATH") if self.env else os.environ.get("PATH")
        return shutil.which(tool, path=path) or tool

    def run(self, tool: str, *args: str, ok_codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        """Run `tool args...` (never through a shell); a return code outside ok_codes raises SlurmError."""
        command = [self._binary(tool), *args]
        shown = [tool, *args]
        self.calls.append(tuple(shown))
        try:
            # errors="replace": a job name is whatever bytes its owner gave sbatch; one that is not UTF-8 must not
            # stop the listing of every job (the parsers then check each record, tools/slurm_parse.py).
            done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", errors="replace",
                                  timeout=self.timeout_s, env=self.env, check=False, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SlurmError(shown, f"failed: {command[0]} not found (set STEWARD_SLURM_BIN_DIR)") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(shown, f"timed out after {self.timeout_s:g}s (is slurmctld reachable?)") from None
        if done.returncode not in ok_codes:
            err = done.stderr.strip() or done.stdout.strip()[:500]
            raise SlurmError(shown, f"exited {done.returncode}: {err}", done.returncode, done.stderr)
        return done
