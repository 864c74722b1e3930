"""A Slurm job's log: the tail of its StdOut file, lines dated by their own timestamps or the file's mtime."""

from __future__ import annotations

import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path

from core.cluster import LogLine

TAIL_BYTES = 1 << 20  # a training log can be gigabytes; progress shows in the last megabyte
# A timestamp at the start of a line: 2026-11-02T14:00:00Z, [2026-11-02 14:00:00,123], 2026/11/02 14:00:00
_STAMP = re.compile(
    r"^\W{0,3}(\d{4})[-/](\d{2})[-/](\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?\s*(Z|[+-]\d{2}:?\d{2})?"
)


def line_time(text: str) -> datetime | None:
    """The timestamp a line starts with (UTC); lines without a zone are read as this host's local time."""
    m = _STAMP.match(text)
    if not m:
        return None
    year, month, day, hour, minute, second, frac, zone = m.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                          int((frac or "0").ljust(6, "0")))
        if zone:
            moment = datetime.fromisoformat(moment.isoformat() + ("+00:00" if zone == "Z" else zone))
        return moment.astimezone(UTC)
    except ValueError:
        return None


class LogNotRead(ValueError):
    """The file is there but is not the job's log to read: another uid owns it, or it is not a regular file."""


def read_tail(path: Path, max_bytes: int = TAIL_BYTES, owner_uid: int | None = None) -> tuple[list[str], datetime] | None:
    """The file's last lines and its mtime, or None when it is missing or unreadable (not on this host?).
    With owner_uid: LogNotRead unless the file opened (a symlink followed) is a regular file that uid owns. Checked
    on the open file, so a path swapped for a link to another file between a check and the read is caught."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO does not block
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if owner_uid is not None:
            if not stat.S_ISREG(info.st_mode):
                raise LogNotRead(f"{path} is not a regular file")
            if info.st_uid != owner_uid:
                raise LogNotRead(f"{path} is owned by uid {info.st_uid}, not the job's user (uid {owner_uid}): "
                                 "Slurm writes a job's output as its user, so this is not its log")
        try:
            size = info.st_size
            mtime = datetime.fromtimestamp(info.st_mtime, UTC)
            handle.seek(max(0, size - max_bytes))
            data = handle.read(max_bytes)
        except OSError:
            return None
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line was cut in the middle
    return lines, mtime


def dated_lines(lines: list[str], mtime: datetime) -> list[LogLine]:
    """Dates every line: its own timestamp, else the last one seen before it; undated lines before the
    first timestamp (or in a log with none) get the file's mtime, the latest they can have been written."""
    stamps = [line_time(text) for text in lines]
    if not any(stamps):
        return [LogLine(at=mtime, text=text) for text in lines]
    out = []
    current: datetime | None = None
    first = next(s for s in stamps if s is not None)
    for text, stamp in zip(lines, stamps, strict=True):
        current = stamp or current
        out.append(LogLine(at=current or first, text=text))
    return out


def tail_log(path: Path, since: datetime, until: datetime, limit: int, owner_uid: int | None = None) -> list[LogLine]:
    """Lines dated in [since, until], oldest first, the newest `limit` of them; [] when the file is missing.
    owner_uid: as read_tail (LogNotRead when the file is not that uid's)."""
    if limit <= 0:
        return []
    read = read_tail(path, owner_uid=owner_uid)
    if read is None:
        return []
    lines, mtime = read
    since, until = since.astimezone(UTC), until.astimezone(UTC)
    window = [line for line in dated_lines(lines, mtime) if since <= line.at <= until]
    return window[-limit:]


def expand_output_path(pattern: str, *, job_id: str, user: str, name: str, node: str | None) -> str:
    """Fills in sbatch's filename patterns (%j %u %x %N %A %a %%) for Slurm versions that print them raw."""
    array_job, _, task = job_id.partition("_")
    values = {"j": job_id.split("_")[0], "u": user, "x": name, "N": node or "", "A": array_job, "a": task, "%": "%"}
    return re.sub(r"%(\d*)([jJuxNAa%])", lambda m: values.get(m.group(2), m.group(0)) if m.group(2) != "J"
                  else values["j"], pattern)
