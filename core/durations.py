"""Parse the scenario format's durations (`30s`, `15m`, `2h`, `1d` or plain seconds)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
# Compound forms, as format_duration writes them (`2h30m`, `1h04m`, `1d6h`): units largest first, each once.
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([dhms])")
_ORDER = "dhms"


def parse_duration(value: object) -> float:
    """Seconds for a duration written as `90`, `90s`, `15m`, `2h`, `1d`, `1.5h` or `2h30m` (what format_duration
    writes, read back)."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"duration must not be negative: {value!r}")
        return float(value)
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match:
            return float(match.group(1)) * _UNITS[match.group(2) or "s"]
        parts = _PART.findall(value)
        units = [unit for _, unit in parts]
        if (len(parts) > 1 and "".join(f"{n}{u}" for n, u in parts) == "".join(value.split())
                and units == sorted(set(units), key=_ORDER.index)):
            return sum(float(n) * _UNITS[u] for n, u in parts)
    raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 15m, 2h, 2h30m, 1d or seconds)")


Duration = Annotated[float, BeforeValidator(parse_duration)]


def format_duration(seconds: float) -> str:
    """Short human form: 45s, 20m, 2h30m."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, _ = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours == 0:
        return f"{minutes}m"
    return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"


# Units as people type them in chat and forms: `4 hours`, `30 mins`, `4小时`, `2天`.
_UNIT_WORDS = re.compile(r"(\d+(?:\.\d+)?)\s*[个個]?(小时|小時|分钟|分鐘|天|hours?|hrs?|minutes?|mins?|days?)(?![A-Za-z])",
                         re.IGNORECASE)
_UNIT_OF = {"小时": "h", "小時": "h", "分钟": "m", "分鐘": "m", "天": "d", "hour": "h", "hr": "h", "minute": "m",
            "min": "m", "day": "d"}


def spoken_units(text: str) -> str:
    """`text` with every spoken duration written the short way (`4 hours` -> `4h`, `30分钟` -> `30m`)."""
    def short(m: re.Match[str]) -> str:
        word = m.group(2)
        return f"{m.group(1)}{_UNIT_OF.get(word.lower().rstrip('s') if word.isascii() else word, 'h')}"

    return _UNIT_WORDS.sub(short, text)


def parse_spoken_duration(value: str) -> float:
    """parse_duration that also takes the units people type (`4 hours`, `4小时`)."""
    return parse_duration(spoken_units(value.strip()).replace(" ", "").lower())

