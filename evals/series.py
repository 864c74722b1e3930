"""Read a load series (CSV, gz or plain: a time column, a load column, optional capacity) into hourly means."""

from __future__ import annotations

import csv
import gzip
import io
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from agent.history.forecast import HOUR

TIME_NAMES = ("time", "timestamp", "ts", "datetime", "date", "epoch", "time_s")
VALUE_NAMES = ("allocated_gpus", "gpus_allocated", "allocated", "used_gpus", "gpus_used", "busy_gpus", "gpus_busy",
               "active_gpus", "gpus_active", "active", "busy", "used", "load", "value", "gpus")
# A bare `gpus` beside a load column (ts,gpus_used,gpus) is the capacity; alone (time,gpus) it is the load.
CAPACITY_NAMES = ("capacity", "total", "total_gpus", "gpus_total", "size", "gpus")
LAST_SECOND = 253402300799.0  # 9999-12-31T23:59:59Z
MAX_HOURS = 10 * 8766  # ten years of hours: a longer span means the times are not in seconds


class SeriesError(ValueError):
    """A series that cannot be read; the message names the file, row and column."""


def open_text(path: Path) -> io.StringIO:
    """The file's text, gunzipped when it starts with the gzip magic; errors name the file."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return io.StringIO(raw.decode("utf-8-sig"))
    except OSError as exc:
        raise SeriesError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        raise SeriesError(f"{path}: not a CSV text file: {exc}") from None


def read_header(path: Path) -> tuple[list[str], csv.DictReader]:
    reader = csv.DictReader(open_text(path))
    if not reader.fieldnames:
        raise SeriesError(f"{path}: empty file (no header row)")
    return [h.strip() for h in reader.fieldnames], reader


@dataclass
class HourlySeries:
    path: str
    start: datetime  # the first hour (UTC)
    values: np.ndarray  # mean load per hour, gaps filled by linear interpolation (see `filled`)
    capacity: np.ndarray | None  # mean capacity per hour, same filling
    filled_hours: int  # hours with no sample, interpolated
    columns: dict[str, str]
    rows: int
    # Which hours had no load or capacity sample (None: every hour had both). An interpolated hour leans on the
    # next sample, so a backtest origin whose history ends in one would see after the origin; it is left out.
    filled: np.ndarray | None = None

    @property
    def hours(self) -> int:
        return len(self.values)


def _pick(header: list[str], wanted: str | None, names: tuple[str, ...], role: str, flag: str, source: str,
          required: bool, taken: str | None = None) -> str | None:
    lowered = {h.lower(): h for h in header if h != taken}
    if wanted is not None:
        if wanted.strip().lower() not in lowered:
            raise SeriesError(f"{source}: no column {wanted!r} for the {role}; columns: {', '.join(header)}")
        return lowered[wanted.strip().lower()]
    for name in names:
        if name in lowered:
            return lowered[name]
    if required:
        raise SeriesError(f"{source}: cannot tell which column is the {role} (tried {', '.join(names)}); "
                          f"columns: {', '.join(header)}; name it with {flag}")
    return None


def parse_time(text: str) -> float:
    """Epoch seconds from a number or an ISO 8601 date-time (no zone = UTC)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        at = datetime.fromisoformat(text)
        return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite time")
    return value


def _fill(sums: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hourly means, empty hours interpolated, and which hours were empty."""
    out = np.full(len(sums), np.nan)
    have = counts > 0
    out[have] = sums[have] / counts[have]
    idx = np.arange(len(out))
    if not have.all():
        out[~have] = np.interp(idx[~have], idx[have], out[have])
    return out, ~have


def load_hourly(path: str | Path, *, time_col: str | None = None, value_col: str | None = None,
                capacity_col: str | None = None) -> HourlySeries:
    """Read the series and average it per clock hour; row numbers in errors count the header as row 1."""
    path = Path(path)
    source = str(path)
    header, reader = read_header(path)
    t_name = _pick(header, time_col, TIME_NAMES, "time column", "--time-col", source, True)
    v_name = _pick(header, value_col, VALUE_NAMES, "load column", "--value-col", source, True)
    c_name = _pick(header, capacity_col, CAPACITY_NAMES, "capacity column", "--capacity-col", source, False,
                   taken=v_name)
    assert t_name is not None and v_name is not None
    times: list[float] = []
    values: list[float] = []
    caps: list[float] = []
    for row_no, row in enumerate(reader, start=2):
        if None in row or any(row.get(h) is None for h in header):
            raise SeriesError(f"{source}: row {row_no} has a different number of fields than the header")
        try:
            t = parse_time(row[t_name])
        except ValueError:
            raise SeriesError(f"{source}: row {row_no}, column {t_name!r}: {row[t_name]!r} is not a time "
                              "(epoch seconds or ISO 8601)") from None
        cells = [(v_name, values)] + ([(c_name, caps)] if c_name else [])
        for name, sink in cells:
            text = row[name].strip()
            try:
                number = float(text) if text else math.nan
            except ValueError:
                raise SeriesError(f"{source}: row {row_no}, column {name!r}: {text!r} is not a number") from None
            if math.isinf(number) or number < 0:
                raise SeriesError(f"{source}: row {row_no}, column {name!r}: {text!r} is not a load (a finite "
                                  "number >= 0)")
            sink.append(number)
        times.append(t)
    if not times:
        raise SeriesError(f"{source}: no data rows")
    t_arr = np.asarray(times)
    v_arr = np.asarray(values)
    if t_arr.max() > LAST_SECOND or t_arr.min() < -LAST_SECOND:
        raise SeriesError(f"{source}: column {t_name!r} holds {t_arr.max():.0f}, after the year 9999 in seconds; "
                          "times must be seconds (milliseconds?) or ISO 8601 date-times")
    first_hour = math.floor(t_arr.min() / HOUR)
    bucket = (np.floor(t_arr / HOUR) - first_hour).astype(int)
    n = int(bucket.max()) + 1
    if n > MAX_HOURS:
        raise SeriesError(f"{source}: column {t_name!r} spans {n / 8766:.0f} years; times must be seconds "
                          "(milliseconds?) or ISO 8601 date-times")
    ok = np.isfinite(v_arr)
    if not ok.any():
        raise SeriesError(f"{source}: column {v_name!r} has no numbers")
    hourly, empty = _fill(np.bincount(bucket[ok], v_arr[ok], n), np.bincount(bucket[ok], minlength=n))
    filled = empty.copy()
    capacity = None
    if c_name:
        c_arr = np.asarray(caps)
        c_ok = np.isfinite(c_arr)
        if c_ok.any():
            capacity, c_empty = _fill(np.bincount(bucket[c_ok], c_arr[c_ok], n),
                                      np.bincount(bucket[c_ok], minlength=n))
            filled |= c_empty
    return HourlySeries(path=source, start=datetime.fromtimestamp(first_hour * HOUR, UTC), values=hourly,
                        capacity=capacity, filled_hours=int(empty.sum()),
                        columns={"time": t_name, "value": v_name, "capacity": c_name or ""}, rows=len(times),
                        filled=filled if filled.any() else None)
