"""The built-in rules about the data's sources and the GPUs' use: a source gone silent, a
field that stopped arriving, an allocated GPU left idle. Gathered into the pack by
fleet/alerts/rulepack.py; sources of every threshold: docs/rules.md."""

from __future__ import annotations

from fleet.alerts.rulespec import GPU_NAME, RuleSpec
from fleet.read.ledger_rules import DEFAULT_RULES as LEDGER

_GPU = GPU_NAME
_SILENT = {"node": "{node}", "rack": "{rack}", "loop": "{loop}", "site": "{site}"}
SOURCE_RULES: tuple[RuleSpec, ...] = (
    *(
        RuleSpec(
            f"{scope}-agent-silent",
            f"{scope.capitalize()} agent silent",
            scope,
            "agent_silent_intervals",
            "ge",
            3,
            1,
            0,
            "warning",
            f"{name}: no batch for {{value:.0f}} intervals",
            "No batch for 3 of the source's own batch intervals, as the agent declares"
            " them (a node agent: every second; a facility agent: its poll cadence).",
        )
        for scope, name in _SILENT.items()
    ),
    *(
        RuleSpec(
            f"{scope}-metric-stale",
            f"{scope.capitalize()} metric stopped",
            scope,
            "metric_lag_s",
            "ge",
            120,
            30,
            0,
            "warning",
            f"{name}: {{metric}} has not arrived for {{value:.0f}} s",
            "A field trails the entity's newest sample by 120 s, longer than its source's"
            " own pace allows: it stopped arriving while the agent still reports.",
        )
        for scope, name in {**_SILENT, "gpu": _GPU, "feed": "{rack} feed {feed}"}.items()
    ),
)

# Waste, not a risk to hardware or jobs: info, so it reaches the channels that asked for it
# (a team's route, `owner` set, minimum severity info) and pages nobody. The for-duration is
# the ledger's idle run, so the alert and the ledger call the same minutes idle, and bursty
# inference, idle for seconds between requests, never lasts it.
USAGE_RULES: tuple[RuleSpec, ...] = (
    RuleSpec(
        "gpu-allocated-idle",
        "Allocated GPU idle",
        "gpu",
        "allocated_idle",
        "ge",
        1,
        None,
        LEDGER.idle_minutes * 60,
        "info",
        "{owner}/{workload} holds " + _GPU + " and runs nothing",
        f"An allocation holds the GPU while it is under {LEDGER.idle_util_pct:g} % utilisation"
        f" and near idle power for {LEDGER.idle_minutes} minutes (the energy ledger's"
        " allocated-idle thresholds): reclaim it or ask its owner.",
    ),
)
