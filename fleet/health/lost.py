"""A *lost* GPU: its node reports, the GPU does not — it fell off the bus (XID 79) or its
driver lost it. The worst hardware state in the building, and never "no data": "no data"
is for a source that stopped talking (its node is silent too), which is unknown.

This module is the one owner of the state and its words; the alert engine (superseding a
lost GPU's thermal alerts, consequences of an incident), the pages, the live payloads,
`/metrics` and Slack all use it.
"""

from __future__ import annotations

from fleet.health.levels import Level, Reading
from fleet.health.rules import gpu_missing
from fleet.health.thresholds import STALE_AFTER_S

# NVIDIA's XID 79: "GPU has fallen off the bus" (docs.nvidia.com/deploy/xid-errors).
OFF_THE_BUS_XID = 79
LOST = "lost"  # the state's name, as pages, payloads and `/metrics` carry it
LOST_LEVEL = Level.CRIT
OFF_THE_BUS = "off the bus"
MISSING_FROM_NODE = "missing from its node"


def gpu_lost(
    gpu: Reading, node: Reading, now: float, stale_after_s: float = STALE_AFTER_S
) -> bool | None:
    """True when the GPU's node reports and the GPU has nothing fresh; None when the node
    is silent too (then the GPU is unknown — "no data" — not lost)."""
    return gpu_missing(gpu, node, now, stale_after_s)


def gpus_lost_words(count: int) -> str:
    """ "1 GPU lost", "33 GPUs lost": how a rack tile, the site strip and a message count them."""
    return f"{count} GPU lost" if count == 1 else f"{count} GPUs lost"


def gpus_off_the_bus_words(count: int) -> str:
    """ "1 GPU off the bus", "33 GPUs off the bus"."""
    noun = "GPU" if count == 1 else "GPUs"
    return f"{count} {noun} {OFF_THE_BUS}"


def lost_cause_words(xid: int | None) -> str:
    """Why a GPU is lost, as said after its time: "(XID 79)" when its agent reported the XID,
    else that it is missing from its node."""
    return f"XID {xid}" if xid is not None else MISSING_FROM_NODE
