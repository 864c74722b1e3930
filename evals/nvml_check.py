"""Check NvmlCollector on a machine with a real NVIDIA GPU: prints what it read; exit 0 when every GPU read.

    python evals/nvml_check.py            # needs only pynvml (pip install nvidia-ml-py) and the driver
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from tools.nvml import NvmlCollector  # noqa: E402


def _fmt(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:.1f}{unit}"


def main() -> int:
    try:
        collector = NvmlCollector().open()
    except ImportError:
        print("FAIL: pynvml is not installed (pip install nvidia-ml-py)")
        return 1
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        print(f"FAIL: NVML did not start: {type(exc).__name__}: {exc}")
        return 1
    try:
        collector.read()  # the first per-process utilisation call only sets the timestamp baseline
        time.sleep(1.0)
        readings = collector.read()
        print(f"NVML ok: driver {collector.driver or '?'}, host {collector.hostname}, {len(readings)} GPU(s)")
        problems = []
        for r in readings:
            print(f"  GPU {r.index} {r.model} {r.uuid}: util {_fmt(r.util, '%')}, mem {_fmt(r.mem_used_mb, ' MiB')}"
                  f" / {_fmt(r.mem_total_mb, ' MiB')}, power {_fmt(r.power_w, ' W')}, temp {_fmt(r.temp_c, ' C')},"
                  f" last XID {r.xid or 'none'}")
            for p in r.processes:
                owner = p.owner.pod or p.owner.pod_uid or (f"slurm job {p.owner.slurm_job}" if p.owner.slurm_job
                                                           else "no job")
                print(f"    pid {p.pid}: {_fmt(p.used_mb, ' MiB')}, SM {_fmt(p.sm_util, '%')}, {owner}")
            if r.util is None or r.mem_used_mb is None:
                problems.append(f"GPU {r.index}: utilisation or memory unreadable")
        print("\n--- dcgm-exporter text ---")
        print(collector.render(readings), end="")
        if not readings:
            problems.append("no GPUs found")
        for problem in problems:
            print(f"FAIL: {problem}")
        print("PASS" if not problems else "")
        return 1 if problems else 0
    finally:
        collector.close()


if __name__ == "__main__":
    sys.exit(main())
