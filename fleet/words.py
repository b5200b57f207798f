"""How the server-rendered pages say a level, an age and a power source in words.

Colour is never the only signal: every level the pages show is also one of these
words. The words match static/dashboard/fleet.js so a rack reads the same on the
overview and on its own page.
"""

from __future__ import annotations

import datetime as dt

from fleet import health

LEVEL_WORDS: dict[str, str] = {
    health.Level.OK: "OK",
    health.Level.WARN: "Warning",
    health.Level.CRIT: "Critical",
    health.Level.UNKNOWN: "No data",
}

SOURCE_WORDS: dict[str, str] = {
    "pdu": "measured at the PDU",
    "nodes": "sum of node meters",
    "gpus": "sum of GPU power only (an undercount)",
    "none": "no live data",
}


def level_word(level: health.Level) -> str:
    return LEVEL_WORDS.get(level, str(level))


def age_words(seconds: float) -> str:
    """An age an operator reads at a glance: seconds up to 90 s, then minutes, then hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def no_data_words(ts: float | None, now: float) -> str:
    """What a stale figure says instead of a frozen number: how long it has been quiet."""
    if ts is None:
        return "no data yet"
    return f"no data for {age_words(max(0.0, now - ts))}"


def as_of(now: float) -> str:
    """The moment a server-rendered page describes (UTC), shown because it does not update."""
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%H:%M:%S UTC")


def clock_offset_text(stats: object) -> str:
    """The agent's clock against the server's, as the agent measured it from acks
    (docs/protocol.md, "Time and clocks"): positive = the agent is behind."""
    offset = stats.get("clock_offset_s") if isinstance(stats, dict) else None
    if not isinstance(offset, int | float) or isinstance(offset, bool):
        return "not measured"
    side = "behind" if offset > 0 else "ahead"
    text = f"{abs(offset):.3f} s {side}" if offset else "in step"
    # Past a second it matters to readings lined up across nodes; refused past 300 s ahead.
    return f"⚠ {text}" if abs(offset) >= 1.0 else text
