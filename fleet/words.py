"""How Fleetwatch says a level, an age, a power figure, a PUE and a headroom in words.

The one owner of these words. Colour is never the only signal: every level the pages
show is also one of these words. Server-rendered pages, the live payloads and Slack call
the functions here; the browser's scripts get the words they fill in from
`browser_words()` (embedded in each live page, read by static/dashboard/live.js), so no
script holds a word or a rule of its own. tests/dashboard/test_one_owner_per_word.py
checks that.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from fleet import health
from fleet.read import ledger_rules as ledger

LEVEL_WORDS: dict[str, str] = {
    health.Level.OK: "OK",
    health.Level.WARN: "Warning",
    health.Level.CRIT: "Critical",
    health.Level.UNKNOWN: "No data",
}

# Where a rack's power figure comes from (`health.PowerSource`).
SOURCE_WORDS: dict[str, str] = {
    "pdu": "measured at the PDU",
    "nodes": "sum of node meters",
    "gpus": "sum of GPU power only (an undercount)",
    "none": "no live data",
}

# Where a site's cooling power comes from (fleet/read/site_summary.py `cooling_source`).
COOLING_SOURCE_WORDS: dict[str, str] = {
    "meter": "the cooling plant's own meter",
    "derived": "facility − IT (no cooling meter): every overhead, cooling the most of it",
}

# The energy ledger's states (fleet/read/ledger_rules.py, docs/ledger.md), as the efficiency
# page, its chart and its tables name them.
STATE_WORDS: dict[str, str] = {
    ledger.BUSY: "Busy",
    ledger.ALLOCATED_IDLE: "Allocated, idle",
    ledger.IDLE_HELD_MEMORY: "Idle, memory held",
    ledger.STALLED: "Stalled",
    ledger.UNALLOCATED: "Unallocated",
    ledger.LOST: "Lost or down",
}

# A rollup tier's bucket, as a page says which one its figures come from.
TIER_WORDS: dict[str, str] = {"1m": "1-minute", "1h": "1-hour"}

# The efficiency page's own phrases (dashboard/efficiency.py).
EFFICIENCY_PHRASES: dict[str, str] = {
    "window": "last {span}: {start} – {end}",
    "not_kept": "no figures yet: the energy ledger stores a site's minutes once they are rolled"
    " up (the fleet.ledger task, every minute)",
    "no_team": "no team",
    "gpu_hours": "GPU-hours",
    "by_team": "GPU-hours by state per team",
    "by_rack": "GPU-hours by state per rack (no workloads in the window)",
    "top_of": "the {shown} with the most GPU-hours of {count}; the CSV has them all",
    "idle_gpus": "{idle} of {held}",
    "metered": "{charged} kWh charged to jobs and the pool; the facility meter: {metered} kWh"
    " ({error})",
}


# An age in the unit an operator reads at a glance: (below this many seconds, count in
# units of this many seconds, the unit's word); the last row has no upper bound. The
# browser ticks ages between pushes with this same table (FleetLive.ageWords).
AGE_UNITS: tuple[tuple[float | None, float, str], ...] = (
    (90, 1, "s"),
    (90 * 60, 60, "min"),
    (36 * 3600, 3600, "h"),
    (None, 86400, "d"),
)

# Phrases the browser completes with figures it holds ({name} is filled in); the server
# says them through the same templates (`say`).
PHRASES: dict[str, str] = {
    "no_data_yet": "no data yet",
    "no_data_for": "no data for {age}",
    "last_data": "last data {age} ago",
    "throttling": "{thermal} in thermal slowdown · {power} at their power limit",
    "gpus_thermal": "{n} GPU(s) in thermal slowdown",
    "at_power_limit": "{n} at their power limit",
    "alerts_on_rack": "{n} firing on the rack (worst {severity})",
    "alerts_on_loop": "{n} on its loop {loop} (worst {severity})",
    "no_alerts": "no alerts firing",
    "alerts_critical": " ({critical} critical)",
    "counts_as_of": "Alert and agent counts as of {age} ago (no facility data since)",
    "rack_label": "Rack {name}: {word}, {figure}",
    "cooled_by": ", cooled by {loop}",
}


def say(phrase: str, **values: object) -> str:
    return PHRASES[phrase].format(**values)


def state_word(state: str) -> str:
    return STATE_WORDS.get(state, state)


def efficiency_words(phrase: str, **values: object) -> str:
    return EFFICIENCY_PHRASES[phrase].format(**values)


def utc_minute(ts: float) -> str:
    """A moment to the minute, UTC: where a window starts and ends, since when a GPU idles."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def level_word(level: health.Level) -> str:
    return LEVEL_WORDS.get(level, str(level))


def age_words(seconds: float) -> str:
    """An age an operator reads at a glance: "45 s", "12 min", "3 h", "2 d" (`AGE_UNITS`).
    Halves round up, as the browser's Math.round does, so both say the same."""
    for below, unit, word in AGE_UNITS:
        if below is None or seconds < below:
            return f"{math.floor(seconds / unit + 0.5)} {word}"
    raise AssertionError("AGE_UNITS ends without a bound")  # pragma: no cover


def no_data_words(ts: float | None, now: float) -> str:
    """What a stale figure says instead of a frozen number: how long it has been quiet."""
    if ts is None:
        return say("no_data_yet")
    return say("no_data_for", age=age_words(max(0.0, now - ts)))


def power_words(watts: float | None) -> str:
    """Power as an operator reads it: kW, or MW from 1 MW up."""
    if watts is None:
        return "no data"
    if watts >= 1e6:
        return f"{watts / 1e6:.2f} MW"
    return f"{watts / 1e3:.1f} kW"


def pue_words(pue: float | None, category: int | None, category_words: str | None) -> str:
    """ "1.32 (category 2: …)": a PUE is never shown without what its meters allow."""
    if pue is None:
        return "no data"
    return f"{pue:.2f} (category {category}: {category_words})"


def span_words(seconds: int) -> str:
    """A span of history at the grain the rollups have: minutes, hours, then days."""
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def pue_history_words(
    label: str, window_s: int, covered_s: int, kept_s: float, enough: bool, annual: bool
) -> str:
    """Whether a rolling PUE's window is full and, if not, why: retention keeps less than
    the window, or history has not reached back that far yet (fleet/read/pue.py judges)."""
    if enough:
        return "full window"
    if kept_s < window_s:
        return f"not enough history: {span_words(int(kept_s))} of history is kept"
    # The 12-month figure is the one reported (ISO/IEC 30134-2): it is named as such.
    needs = f"annual PUE needs {label}" if annual else f"needs {label}"
    return f"{needs}: {span_words(covered_s)} so far"


def headroom_words(headroom_c: float | None) -> str:
    """Headroom to the GPU's own slowdown limit, never a fleet-wide temperature."""
    if headroom_c is None:
        return "headroom unknown"
    if headroom_c < 0:
        return f"{-headroom_c:.0f} °C past slowdown"
    return f"{headroom_c:.0f} °C to slowdown"


def throttling_words(thermal: int, power: int) -> str:
    return say("throttling", thermal=thermal, power=power)


def browser_words() -> dict[str, Any]:
    """Everything a live page's script says or judges by, as data: level words and their
    order (worst last), the level a figure takes once stale, the age table and phrases."""
    order = sorted(health.Level, key=lambda level: level.rank)
    return {
        "levels": {level.value: level_word(level) for level in order},
        "level_order": [level.value for level in order],
        "stale_level": health.Level.UNKNOWN.value,
        "ages": [[below, unit, word] for below, unit, word in AGE_UNITS],
        "phrases": PHRASES,
    }


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


# InfiniBand/RoCE ports (agents/protocol/fabric.py names the counters; docs/protocol.md
# `fabric`), as the node page names them.
FABRIC_COUNTER_WORDS: dict[str, str] = {
    "link_downed": "Link went down",
    "link_error_recovery": "Link retrained",
    "symbol_error": "Symbol errors",
    "port_rcv_errors": "Bad packets received",
    "port_rcv_remote_physical_errors": "Packets marked bad by the far end",
    "port_rcv_switch_relay_errors": "Packets the switch could not relay",
    "port_xmit_discards": "Packets discarded on send",
    "port_xmit_constraint_errors": "Send partition errors",
    "port_rcv_constraint_errors": "Receive partition errors",
    "local_link_integrity_errors": "Local link integrity errors",
    "excessive_buffer_overrun_errors": "Receive buffer overruns",
    "VL15_dropped": "Management packets dropped",
}
LINK_LAYER_WORDS: dict[str, str] = {"InfiniBand": "InfiniBand", "Ethernet": "RoCE (Ethernet)"}
