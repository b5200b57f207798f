"""The built-in time-to-limit rules (docs/forecast.md, docs/rules.md): part of the rule
pack (fleet/alerts/rulepack.py, `BUILTIN_RULES`)."""

from __future__ import annotations

from fleet.alerts.rulespec import FACILITY, RuleSpec
from fleet.health.thresholds import HEADROOM_CRIT_C

# Time to limit (docs/forecast.md): a warning while there is still time to act, before the
# level rules above fire. A forecast is fitted to minute means, so the for-duration spans two
# minutes' forecasts; it clears when the crossing moves a quarter further off, or when there
# is no forecast any more (flat, falling, already over: the level rules take over).
FORECAST_RULES: tuple[RuleSpec, ...] = (
    RuleSpec(
        "rack-power-forecast",
        "Rack power forecast to pass its budget",
        "rack",
        "power_minutes_to_limit",
        "le",
        60,
        75,
        60,
        "warning",
        "{rack} forecast to reach {limit} at {crossing} (in ~{value:.0f} min) at this trend",
        "The rack's draw, at the trend of the last hours, reaches its budget within 60"
        " minutes: move or cap work before it does.",
        labels=FACILITY,
    ),
    RuleSpec(
        "loop-supply-forecast",
        "CDU supply forecast to pass its limit",
        "loop",
        "supply_minutes_to_limit",
        "le",
        30,
        40,
        60,
        "warning",
        "{loop} supply forecast to reach {limit} at {crossing} (in ~{value:.0f} min) at this trend",
        "The loop's supply temperature, at the trend of the last hours, reaches its W-class"
        " (or own) limit within 30 minutes.",
        labels=FACILITY,
    ),
    RuleSpec(
        "rack-feeds-n1-forecast",
        "Rack feeds forecast to pass their N+1",
        "rack",
        "feeds_n1_minutes_to_limit",
        "le",
        60,
        75,
        60,
        "warning",
        "{rack} feeds forecast to reach {limit}, their N+1, at {crossing}"
        " (in ~{value:.0f} min) at this trend",
        "The rack's feeds together, at the trend of the last hours, reach what they may carry"
        " with the largest one lost within 60 minutes: losing a feed then would overload the"
        " others.",
        labels=FACILITY,
    ),
    RuleSpec(
        "gpu-headroom-forecast",
        "GPU forecast to reach its slowdown limit",
        "gpu",
        "headroom_minutes_to_limit",
        "le",
        30,
        40,
        60,
        "warning",
        "{node} GPU {gpu} forecast to reach {limit} at {crossing} (in ~{value:.0f} min) at"
        " this trend",
        f"The GPU's temperature, at the trend of the last hours, comes within"
        f" {HEADROOM_CRIT_C:g} °C of its own slowdown limit (where gpu-headroom-critical fires)"
        " within 30 minutes.",
    ),
    RuleSpec(
        "database-disk-forecast",
        "Database forecast to fill its disk",
        "site",
        "disk_minutes_to_limit",
        "le",
        12 * 60,
        15 * 60,
        60,
        "warning",
        "The database forecast to fill its disk ({limit}) at {crossing} (in ~{value:.0f} min)"
        " at this trend",
        "The database's size, at the trend of the last day, fills the disk it lives on within"
        " 12 hours: add space, or shorten retention (docs/configuration.md), before it does."
        " One database serves every site, so each site has this alert.",
    ),
)
