"""The health record's facts that an agent sends of its own accord: the GPU's lifetime ECC
counts and retired pages (`gpu_info[].memory_errors`, stored whole in the GPU's `info`) and
the resets and driver reloads it saw (`gpu_reset`, `driver_reload` events).

Resets are also derived from counters going down in the tiers (fleet/read/health_record.py,
fleet/storage/health_hours.py), for agents that send no such events. A reset seen both ways
counts once: the record takes the larger of the two counts over its window (an agent that
sends events sees every reset the counters show, from the moment it was installed; before
it, only the counters do), and the event's moment, which is exact, where the derived reset
is the same one (its bucket ends at most `SAME_RESET_S` after the event).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agents.protocol.memory import MEMORY_ERRORS_KEY, NOT_SUPPORTED, RESET_EVENTS

# A derived reset whose bucket ends this long after an event's moment is that event's: the
# 1m bucket the restarted counter shows in ends within a minute of the agent's read, and a
# volatile ECC count read every tick may show it a minute before.
SAME_RESET_S = 120.0

# `memory_errors` key -> the GpuFacts field it fills
_FACTS = {
    "ecc_sbe_agg_total": "ecc_sbe_aggregate",
    "ecc_dbe_agg_total": "ecc_dbe_aggregate",
    "retired_pages_sbe": "retired_pages_sbe",
    "retired_pages_dbe": "retired_pages_dbe",
    "retired_pages_pending": "retired_pages_pending",
}
_FLAGS = frozenset({"retired_pages_pending"})


def memory_facts(info: Mapping[str, Any]) -> dict[str, Any]:
    """GpuFacts fields from a GPU's stored `gpu_info`: a count, a flag, or the field named in
    `unsupported`; a key the agent did not send stays out (None: not reported)."""
    block = info.get(MEMORY_ERRORS_KEY)
    out: dict[str, Any] = {}
    unsupported: set[str] = set()
    if not isinstance(block, dict):
        return {"unsupported": frozenset()}
    for key, fact in _FACTS.items():
        value = block.get(key)
        if value == NOT_SUPPORTED:
            unsupported.add(fact)
        elif isinstance(value, int) and not isinstance(value, bool):
            out[fact] = bool(value) if key in _FLAGS else value
    out["unsupported"] = frozenset(unsupported)
    return out


def is_reset(kind: str) -> bool:
    return kind in RESET_EVENTS


def resets(
    derived: int, derived_last: float | None, event_times: Iterable[float]
) -> tuple[int, float | None]:
    """(how many resets and driver reloads, when the last one was seen) from the derived
    count and last bucket end, and the moments of the reset events."""
    times = sorted(event_times)
    if not times:
        return derived, derived_last
    last_event = times[-1]
    if derived_last is None or derived_last <= last_event + SAME_RESET_S:
        last = last_event
    else:
        last = derived_last
    return max(derived, len(times)), last
