"""GPUs per node and GPU model of common AWS GPU instance types, for pools whose tags do not say."""

from __future__ import annotations

# instance type -> (GPUs, model). Prices change and differ by region and contract, so they come from
# the pool's tag or the config, never from here.
GPU_INSTANCE_TYPES: dict[str, tuple[int, str]] = {
    "p5e.48xlarge": (8, "H200-141GB"),
    "p5en.48xlarge": (8, "H200-141GB"),
    "p5.48xlarge": (8, "H100-80GB"),
    "p4de.24xlarge": (8, "A100-80GB"),
    "p4d.24xlarge": (8, "A100-40GB"),
    "p3dn.24xlarge": (8, "V100-32GB"),
    "p3.16xlarge": (8, "V100-16GB"),
    "p3.8xlarge": (4, "V100-16GB"),
    "p3.2xlarge": (1, "V100-16GB"),
    "g6e.48xlarge": (8, "L40S-48GB"),
    "g6e.12xlarge": (4, "L40S-48GB"),
    "g6e.xlarge": (1, "L40S-48GB"),
    "g6.48xlarge": (8, "L4-24GB"),
    "g6.12xlarge": (4, "L4-24GB"),
    "g6.xlarge": (1, "L4-24GB"),
    "g5.48xlarge": (8, "A10G-24GB"),
    "g5.12xlarge": (4, "A10G-24GB"),
    "g5.xlarge": (1, "A10G-24GB"),
    "g4dn.12xlarge": (4, "T4-16GB"),
    "g4dn.xlarge": (1, "T4-16GB"),
}


def gpus_of(instance_type: str | None) -> tuple[int, str] | None:
    """(GPUs, model) of an instance type, None when it is not in the table."""
    return GPU_INSTANCE_TYPES.get(instance_type or "")
