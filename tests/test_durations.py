"""Durations as the scenario format, the policy and people write them, and as the steward writes them back."""

from __future__ import annotations

import pytest

from core.durations import format_duration, parse_duration, parse_spoken_duration


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400),
                                          ("1.5h", 5400), ("5h20m", 19200), ("1h04m", 3840), ("1d6h", 108000),
                                          ("2h30m15s", 9015)])
def test_single_and_compound_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5m2h", "2h2h", "1e308h", "h", "5h 20", "nanh", "-1h", "4h\x00", "", "2x"])
def test_what_is_not_a_duration_is_named(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize("seconds", [45, 60, 1200, 3840, 9000, 86400 + 3600])
def test_what_format_duration_writes_reads_back(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


def test_spoken_units() -> None:
    assert parse_spoken_duration("4小时") == 4 * 3600 and parse_spoken_duration("30 mins") == 1800
    assert parse_spoken_duration("2 days") == 2 * 86400
