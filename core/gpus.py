"""GPU models' board power: what "near idle" and "real work" are measured against (detectors and the simulator)."""

from __future__ import annotations

import re

# Board power (W) of common datacenter GPUs by dcgm-exporter's modelName; the first match wins, so PCIe and NVL
# variants (lower power) come before their family. Near idle is a share of it (ActivityRule.idle_power_share).
BOARD_POWER_W: tuple[tuple[re.Pattern[str], float], ...] = tuple((re.compile(p), w) for p, w in (
    (r"\bGB200\b", 1200.0), (r"\bB200\b", 1000.0), (r"\bB100\b", 700.0),
    (r"\bH200 NVL\b", 600.0), (r"\bH200\b", 700.0),
    (r"\bH100\b.*\bPCIE\b", 350.0), (r"\bH100 NVL\b", 400.0), (r"\bH100\b", 700.0),
    (r"\bH800\b.*\bPCIE\b", 350.0), (r"\bH800\b", 700.0), (r"\bH20\b", 400.0),
    (r"\bA100\b.*\bPCIE\b", 300.0), (r"\bA100\b", 400.0), (r"\bA800\b.*\bPCIE\b", 300.0), (r"\bA800\b", 400.0),
    (r"\bL40S\b", 350.0), (r"\bL40\b", 300.0), (r"\bL20\b", 275.0), (r"\bL4\b", 72.0),
    (r"\bA40\b", 300.0), (r"\bA30\b", 165.0), (r"\bA10\b", 150.0), (r"\bT4\b", 70.0), (r"\bV100\b", 300.0),
    # Workstation and server RTX cards clusters also run (Max-Q before its family, as PCIe above).
    (r"\bRTX PRO 6000\b.*\bMAX Q\b", 300.0), (r"\bRTX PRO 6000\b", 600.0), (r"\bRTX 6000 ADA\b", 300.0),
    (r"\bRTX A6000\b", 300.0), (r"\bRTX 4090\b", 450.0),
))


def board_power_w(model: str) -> float | None:
    """The board power of a GPU model as dcgm-exporter names it ("NVIDIA A100-SXM4-80GB"); None when unknown."""
    name = re.sub(r"[-_]", " ", model.upper())
    return next((watts for pattern, watts in BOARD_POWER_W if pattern.search(name)), None)


# A MIG instance's GpuSeries.gpu (tools/prometheus.py): MIG_INDEX_BASE + parent index x 100 + GPU_I_ID.
MIG_INDEX_BASE = 10_000
_MIG_MODEL = re.compile(r"\bMIG\b", re.IGNORECASE)


def is_mig_instance(gpu_index: int, model: str) -> bool:
    """A MIG instance, by the steward's index for it or a model name that names a profile ("A100-SXM4-80GB MIG
    1g.10gb"). dcgm-exporter reports the parent GPU's power, PCIe and NVLink on every instance (dcgm-exporter#257):
    they are the whole GPU's, never one instance's work."""
    return gpu_index >= MIG_INDEX_BASE or bool(_MIG_MODEL.search(model))
