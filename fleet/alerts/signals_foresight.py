"""The foresight signals of the catalogue (fleet/alerts/signals.py): time to limit, the
fabric's ports and NVLink, and the GPU health record's states — each computed by its own
module (evaluate_forecast, evaluate_fabric, evaluate_nvlink, evaluate_health)."""

from __future__ import annotations

from fleet.alerts.signal_model import WINDOW, Param, Signal
from fleet.health import fabric as health_fabric
from fleet.health import record

# Time to limit (fleet/read/forecast_sources.py): minutes until the subject's forecast
# reaches its limit, no value without a forecast (flat, noisy, falling, already over, too
# far ahead: docs/forecast.md) — and no forecast is the end of the condition. Summaries
# may name the crossing (`crossing`: "14:42 UTC") and the page's sentence (`forecast`),
# both fixed when the instance starts (fleet/alerts/evaluate_forecast.py).
FORECAST_PLACEHOLDERS = ("crossing", "forecast", "limit")
FORECAST: tuple[Signal, ...] = tuple(
    Signal(
        name,
        scope,
        "min",
        f"minutes until {what} is forecast to reach {limit} at its trend (docs/forecast.md)",
        f"forecast:{subject}",
        placeholders=FORECAST_PLACEHOLDERS,
        absent_clears=True,
    )
    for name, scope, subject, what, limit in (
        ("power_minutes_to_limit", "rack", "rack", "the rack's power", "its budget"),
        ("power_minutes_to_limit", "feed", "feed", "the feed's power", "its rating"),
        ("supply_minutes_to_limit", "loop", "loop_supply", "the supply", "the loop's limit"),
        ("heat_minutes_to_limit", "loop", "loop_heat", "heat removed", "the loop's rating"),
        (
            "feeds_n1_minutes_to_limit",
            "rack",
            "feed_n1",
            "the rack's feeds' summed power",
            "what they carry with the largest lost (N+1)",
        ),
        (
            "headroom_minutes_to_limit",
            "gpu",
            "gpu",
            "the GPU's temperature",
            "its slowdown limit less the critical headroom",
        ),
        (
            "disk_minutes_to_limit",
            "site",
            "disk",
            "the database's size",
            "the disk it lives on (the same for every site)",
        ),
    )
)
FORECAST_SIGNALS = frozenset(s.name for s in FORECAST)

# A node's InfiniBand/RoCE ports (fleet/health/fabric.py): the worst port's figure; no value
# for a node without ports read in the last minute. Summaries may name the port (`port`).
FABRIC: tuple[Signal, ...] = (
    Signal(
        "fabric_port_flaps",
        "node",
        "",
        "link flaps (rises in `link_downed`) of the node's most-flapping port, in the window",
        "fabric:flaps",
        params=(Param("window_s", "float", health_fabric.FLAP_WINDOW_S, WINDOW.help),),
        placeholders=("port",),
    ),
    Signal(
        "fabric_ports_down",
        "node",
        "",
        "ports that were ACTIVE and are not now (a port never ACTIVE is not counted)",
        "fabric:down",
        placeholders=("port",),
    ),
    *(
        Signal(
            limit.signal,
            "node",
            "/h",
            f"`{limit.counter}` rise per hour of the node's fastest-rising port, "
            f"over its last {health_fabric.RATE_WINDOW_S / 60:g}–"
            f"{2 * health_fabric.RATE_WINDOW_S / 60:g} minutes of reads",
            f"fabric:rate:{limit.counter}",
            placeholders=("port",),
        )
        for limit in health_fabric.RATE_LIMITS
    ),
    # A GPU's NVLink error totals (fleet/alerts/evaluate_nvlink.py), against DCGM's limits.
    Signal(
        "nvlink_crc_errors_per_s",
        "gpu",
        "/s",
        "NVLink CRC errors per second, all links, over the GPU's last 5–10 minutes",
        "nvlink:crc_rate",
    ),
    Signal(
        "nvlink_link_errors",
        "gpu",
        "",
        "NVLink replay and recovery errors, all links, in the GPU's last 5–10 minutes",
        "nvlink:link_errors",
    ),
)

# The health record's states (fleet/health/record.py, docs/gpu-health.md): 1 for a GPU in
# that state, as the task fleet.health judged it this minute; no value otherwise, and no
# value ends the condition. Summaries may name the first evidence (`evidence`).
HEALTH: tuple[Signal, ...] = tuple(
    Signal(
        name,
        "gpu",
        "flag",
        f"1 while the GPU's health record says {state} (docs/gpu-health.md)",
        f"health_record:{state}",
        placeholders=("evidence",),
        absent_clears=True,
    )
    for name, state in (
        ("health_watch", record.WATCH),
        ("health_reset_needed", record.RESET_NEEDED),
        ("health_replace", record.REPLACE),
    )
)

HEALTH_SIGNALS = frozenset(s.name for s in HEALTH)
