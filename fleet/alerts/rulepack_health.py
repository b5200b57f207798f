"""The built-in rules of the GPU health record (fleet/health/record.py, docs/gpu-health.md):
part of the rule pack (fleet/alerts/rulepack.py, `BUILTIN_RULES`)."""

from __future__ import annotations

from fleet.alerts.rulespec import GPU_NAME, RuleSpec
from fleet.health import lost as health_lost
from fleet.health import record

_GPU = GPU_NAME

HEALTH_RULES: tuple[RuleSpec, ...] = (
    # The health record's state changes (fleet/health/record.py, docs/gpu-health.md): a
    # pending remap makes a GPU "reset needed"; falling off the bus twice in a week makes it
    # "replace" (a remap failure has its rule above).
    RuleSpec(
        "gpu-row-remap-pending",
        "Row remap pending: reset needed",
        "gpu",
        "remap_pending",
        "ge",
        1,
        None,
        0,
        "warning",
        _GPU + f" has a row remap pending: {record.RESET_NEEDED} to apply it",
        "A remapped row takes effect at the next GPU reset: drain the GPU, then reset it.",
        runbook_url=record.SOURCES["row-remapping"],
    ),
    RuleSpec(
        "gpu-off-the-bus-repeated",
        "Fell off the bus twice in a week: replace",
        "gpu",
        "xid_events",
        "ge",
        record.OFF_THE_BUS_REPLACE,
        None,
        0,
        "critical",
        _GPU + f" fell off the bus {{value:.0f}} times in 7 days: {record.REPLACE}",
        "Two XID 79 (fallen off the bus) in a week: treat it as a hardware fault.",
        params={"codes": [health_lost.OFF_THE_BUS_XID], "window_s": record.OFF_THE_BUS_WINDOW_S},
        runbook_url=record.SOURCES["xid-catalog"],
    ),
    # Each state of the health record (fleet/health/record.py), judged once a minute by the
    # task fleet.health from everything the record holds — thermal history and peers
    # included, which no rule above sees — and named with its first evidence. A GPU's state
    # alerts join the incident its criterion's own rule opened, where it has one.
    RuleSpec(
        "gpu-health-watch",
        "GPU health: watch",
        "gpu",
        "health_watch",
        "ge",
        1,
        None,
        0,
        "info",
        _GPU + f" is on {record.WATCH}: {{evidence}}",
        f"The GPU's health record puts it on {record.WATCH} (docs/gpu-health.md): "
        + record.STATE_ACTIONS[record.WATCH],
        # Off unless an operator turns it on: nothing to do yet, and the record keeps a GPU
        # on watch for up to 30 days after what put it there (a thermal excursion during a
        # CDU failure, long resolved) — an alert that long after its cause is noise. The
        # GPU health page lists every GPU on watch.
        enabled=False,
    ),
    RuleSpec(
        "gpu-health-reset-needed",
        "GPU health: reset needed",
        "gpu",
        "health_reset_needed",
        "ge",
        1,
        None,
        0,
        "warning",
        _GPU + f" needs a reset ({record.RESET_NEEDED}): {{evidence}}",
        f"The GPU's health record says {record.RESET_NEEDED} (docs/gpu-health.md): "
        + record.STATE_ACTIONS[record.RESET_NEEDED],
    ),
    RuleSpec(
        "gpu-health-replace",
        "GPU health: replace",
        "gpu",
        "health_replace",
        "ge",
        1,
        None,
        0,
        "critical",
        _GPU + f" to {record.REPLACE}: {{evidence}}",
        f"The GPU's health record says {record.REPLACE} (docs/gpu-health.md): "
        + record.STATE_ACTIONS[record.REPLACE],
    ),
)
