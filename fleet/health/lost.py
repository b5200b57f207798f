"""A *lost* GPU: its node reports, the GPU does not — it fell off the bus (XID 79) or its
driver lost it. The worst hardware state in the building, and never "no data": "no data"
is for a source that stopped talking (its node is silent too), which is unknown.

This module is the one owner of the state and its words; the alert engine (superseding a
lost GPU's thermal alerts, consequences of an incident), the pages, the live payloads,
`/metrics` and Slack all use it.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.health.levels import Level, Reading, newest_ts, stale
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


def node_reports(
    node: Reading, gpus: Iterable[Reading], now: float, stale_after_s: float = STALE_AFTER_S
) -> bool:
    """Whether a node is talking: its own reading or any of its GPUs' is fresh. Its GPUs
    with nothing fresh are then lost; when it is silent they are "no data"."""
    return not stale(node, now, stale_after_s) or any(
        not stale(g, now, stale_after_s) for g in gpus
    )


def gpu_lost_on(
    gpu: Reading, node_is_reporting: bool, now: float, stale_after_s: float = STALE_AFTER_S
) -> bool:
    """`gpu_lost` once the node's side is known (`node_reports`), for a GPU that has sent
    samples: one that never did reads "no data yet" on the pages (nothing to have lost),
    and a node's and rack's lost counts (`NodeSummary.lost_gpus`) count the same GPUs."""
    return node_is_reporting and newest_ts(gpu) is not None and stale(gpu, now, stale_after_s)


def lost_since_words(when: str, xid: int | None, reported: bool) -> str:
    """A lost GPU's state in a line: "off the bus since 03:23 (XID 79)" when its node
    reported it gone (an XID or `gpu_lost` event at or after its last sample), else
    "missing from its node since 03:23" (`when`: the time as the page shows times)."""
    if not reported:
        return f"{MISSING_FROM_NODE} since {when}"
    cause = f"XID {xid}" if xid is not None else "reported lost by its agent"
    return f"{OFF_THE_BUS} since {when} ({cause})"


# The alert engine's words and bound for lost GPUs (fleet/alerts/consequences.py):
# a lost GPU's thermal and throttle alerts end "superseded: GPU lost"; its off-the-bus
# events (XID 79, `gpu_lost`) stop counting once it sends a sample this long after the
# last of them (it was reset: the 600 s event window need not run out).
SUPERSEDED_BY_LOST = "GPU lost"
RESET_NEEDED = "reset needed"
REPORTS_AGAIN_AFTER_S = 5.0
