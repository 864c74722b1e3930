"""How a time's zone is named to the people who read it."""

from __future__ import annotations

from datetime import UTC, tzinfo

# The zones Chinese readers call 北京时间.
BEIJING = ("Asia/Shanghai", "Asia/Chongqing", "Asia/Harbin", "PRC")


def zone_name(zone: tzinfo) -> str:
    """The zone's IANA key (Asia/Shanghai), UTC for UTC."""
    name = "UTC" if zone is UTC else str(getattr(zone, "key", None) or zone.tzname(None) or "UTC")
    return "UTC" if name == "Etc/UTC" else name


def zone_suffix(zone: tzinfo, language: str) -> str:
    """What follows a time so its reader knows the zone: ` <name>` in English; in Chinese a full-width aside, 北京时间
    for Beijing's (（北京时间）, （UTC）), so the sentence goes on without a space."""
    name = zone_name(zone)
    if language == "zh":
        return "（北京时间）" if name in BEIJING else f"（{name}）"
    return f" {name}"
