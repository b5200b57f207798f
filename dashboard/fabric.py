"""The node page's ports: each InfiniBand/RoCE port its agent reads (fleet/models/fabric.py),
with its state, rate, link layer and error counters, and how much each rose since the server
first saw the port. Words from fleet/words.py; no judgement of its own beyond saying which
counters are not zero, saturated or unsupported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.protocol.fabric import ACTIVE, COUNTERS, saturated
from fleet.models import FabricPort
from fleet.words import FABRIC_COUNTER_WORDS, LINK_LAYER_WORDS, age_words


@dataclass
class CounterCell:
    label: str
    value: str  # "14", "≥ 255 (saturated)", or "unsupported"
    rise: str  # "+2 since first seen", "" when it did not rise
    quiet: bool  # 0 and never rose: shown muted


@dataclass
class PortRow:
    name: str  # "mlx5_0 port 1"
    state: str  # "ACTIVE · LinkUp"
    up: bool
    rate: str
    link_layer: str
    read: str  # "read 8 s ago"
    first_seen: str  # "first seen 3 h ago"
    counters: list[CounterCell] = field(default_factory=list)


def port_rows(node_id: int, now: float) -> list[PortRow]:
    """The node's ports by device and port number; none when its agent reports no fabric."""
    return [_row(port, now) for port in FabricPort.objects.filter(node_id=node_id)]


def _row(port: FabricPort, now: float) -> PortRow:
    state = " · ".join(word for word in (port.state, port.phys_state) if word)
    return PortRow(
        name=f"{port.device} port {port.port}",
        state=state or "state not readable",
        up=port.state == ACTIVE,
        rate=port.rate or "–",
        link_layer=LINK_LAYER_WORDS.get(port.link_layer, port.link_layer or "–"),
        read=f"read {age_words(max(0.0, now - port.ts))} ago",
        first_seen=f"first seen {age_words(max(0.0, now - port.first_seen))} ago",
        counters=[_cell(name, port.counters, port.rises) for name in COUNTERS],
    )


def _cell(name: str, counters: dict[str, int], rises: dict[str, int]) -> CounterCell:
    label = FABRIC_COUNTER_WORDS[name]
    if name not in counters:
        return CounterCell(label, "unsupported", "", quiet=True)
    value, rise = int(counters[name]), int(rises.get(name, 0))
    shown = f"≥ {value:,} (saturated)" if saturated(name, value) else f"{value:,}"
    return CounterCell(
        label, shown, f"+{rise:,} since first seen" if rise else "", quiet=not value and not rise
    )
