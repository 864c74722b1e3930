"""A throwaway single-node Slurm (munged, slurmctld, slurmd) on loopback in a temp dir, for integration tests.

Runs as root in a container: no cgroups (proctrack/linuxproc, task/none), GRES gpu without device
files, no accounting daemon (sacct is then unavailable, so finished jobs are read from scontrol).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import free_port

NODE = "localhost"
GPUS = 8

SLURM_CONF = """\
ClusterName=steward-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
MailProg=/bin/true
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=2
SchedulerParameters=sched_interval=1
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 Gres=gpu:{gpus} State=UNKNOWN
PartitionName=gpu Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName=prod Nodes={node} Default=NO MaxTime=INFINITE State=UP
"""

# Slurm 22.05 drops file-less GPUs ("Removing file-less GPU"), so each fake GPU is a symlink to
# /dev/null: a character device slurmd can stat, and task/none never constrains it.
GRES_CONF = "NodeName={node} Name=gpu File={root}/dev/fakegpu[0-{last}]\n"


@dataclass
class LocalSlurm:
    """Start with `start()`, always `stop()`; `env` points the Slurm CLIs at this cluster."""

    root: Path
    bins: dict[str, str]  # munged, slurmctld, slurmd, sinfo, ...
    env: dict[str, str] = field(default_factory=dict)
    _procs: list[subprocess.Popen] = field(default_factory=list)

    def write_config(self) -> None:
        for sub in ("state", "spool", "munge", "logs", "dev"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for i in range(GPUS):
            (self.root / "dev" / f"fakegpu{i}").symlink_to("/dev/null")
        os.chmod(self.root / "munge", 0o700)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(128))
        os.chmod(key, 0o400)
        values = {"node": NODE, "gpus": GPUS, "last": GPUS - 1, "root": self.root, "cpus": max(2, os.cpu_count() or 2),
                  "ctld_port": free_port(), "slurmd_port": free_port(),
                  "munge_socket": self.root / "munge" / "munge.socket"}
        (self.root / "slurm.conf").write_text(SLURM_CONF.format(**values))
        (self.root / "gres.conf").write_text(GRES_CONF.format(**values))
        self.env = {**os.environ, "SLURM_CONF": str(self.root / "slurm.conf")}

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.root / "logs" / f"{name}.out", "wb")  # noqa: SIM115 - owned by the process
        self._procs.append(subprocess.Popen([self.bins[name], *args], env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True))

    def start(self, timeout_s: float = 40.0) -> None:
        self.write_config()
        m = self.root / "munge"
        self._spawn("munged", "--foreground", "--force", f"--socket={m / 'munge.socket'}",
                    f"--key-file={m / 'munge.key'}", f"--pid-file={m / 'munged.pid'}",
                    f"--seed-file={m / 'munged.seed'}", f"--log-file={m / 'munged.log'}")
        self._wait(lambda: (m / "munge.socket").exists(), timeout_s, "munged socket")
        conf = str(self.root / "slurm.conf")
        self._spawn("slurmctld", "-D", "-i", "-f", conf)
        self._wait(lambda: self.cli("sinfo", "-h").returncode == 0, timeout_s, "slurmctld answering sinfo")
        self._spawn("slurmd", "-D", "-f", conf, "-N", NODE)
        self._wait(self._node_ready, timeout_s, f"node {NODE} idle in sinfo")

    def _node_ready(self) -> bool:
        out = self.cli("sinfo", "-h", "-N", "-o", "%N %t").stdout.split()
        return len(out) >= 2 and out[1] in ("idle", "mix", "alloc")

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        # Startup polling, not a timed assertion: the deadline only bounds a broken setup.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{Path(dead[0].args[0]).name} exited ({dead[0].returncode}) waiting for "
                                   f"{what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    def cli(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.bins.get(name, name), *args], env=self.env, capture_output=True, text=True,
                              timeout=30, check=False)

    def sbatch(self, *args: str) -> int:
        done = self.cli("sbatch", "--parsable", *args)
        if done.returncode != 0:
            raise RuntimeError(f"sbatch failed: {done.stderr}")
        return int(done.stdout.strip().split(";")[0])

    def logs(self) -> str:
        parts = []
        for path in sorted([*self.root.glob("*.log"), *(self.root / "logs").glob("*"), *(self.root / "munge").glob("*.log")]):
            parts.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)

    def stop(self) -> None:
        # Job steps run under slurmstepd, outside the daemons' process groups: end the jobs first.
        if self._procs and self.env:
            self.cli("scancel", "--full", "--state=RUNNING")
            self.cli("scancel", "--state=PENDING")
            for _ in range(60):  # bounded wait for KillWait (2 s) to pass; not a timing assertion
                if not self.cli("squeue", "-h", "-o", "%i").stdout.strip():
                    break
                time.sleep(0.25)
        for proc in reversed(self._procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self._procs.clear()
        self._kill_leftover_steps()

    def _kill_leftover_steps(self) -> None:
        """Job scripts of this cluster that outlived it (and their slurmstepd), found by our temp dir."""
        marker = str(self.root).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if marker not in (proc / "cmdline").read_bytes():
                    continue
                parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                pids = [int(proc.name)]
                if (Path("/proc") / str(parent) / "comm").read_text().strip() == "slurmstepd":
                    pids.append(parent)
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                continue
