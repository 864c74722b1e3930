"""Errors the command line prints as one paragraph, without a traceback."""

from __future__ import annotations


class ConfigurationError(ValueError):
    """A setting or option that cannot work, explained in one paragraph (printed without a traceback)."""


def replay_hint(data_dir: object, filename: str, lang: str = "en") -> str:
    """Where the newest demo replay (`steward sweep`, under DATA_DIR/runs/) keeps `filename`, as a hint to add to a
    "not found" message; "" when there is none. A sweep of the demo writes its own run folder, never the data dir,
    so "run a sweep first" alone sends a newcomer in a circle."""
    from pathlib import Path

    runs = sorted((Path(str(data_dir)) / "runs").glob(f"*/{filename}"), key=lambda p: p.stat().st_mtime)
    if not runs:
        return ""
    folder = runs[-1].parent
    return (f"；最近一次演示巡检的记录在 {folder}：加上 --data-dir {folder}" if lang == "zh"
            else f"; the newest demo sweep's is in {folder}: add --data-dir {folder}")
