"""The node page's ports: each InfiniBand/RoCE port its agent reads (fleet/models/fabric.py),
with its state, rate, link layer and error counters, and how much each rose since the server
first saw the port. Words from fleet/words.py; no judgement of its own beyond saying which
counters are not zero, saturated or unsupported: the rates of the counters the fabric rules
judge, and whether they are over their limit, are fleet/health/fabric.py's, as the rules'.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.protocol.fabric import ACTIVE, COUNTERS, saturated
from fleet.health import fabric as judge
from fleet.models import FabricPort
from fleet.words import FABRIC_COUNTER_WORDS, LINK_LAYER_WORDS, age_words


@dataclass
class CounterCell:
    label: str
    value: str  # "14", "≥ 255 (saturated)", or "unsupported"
    rise: str  # "+2 since first seen", "" when it did not rise
    quiet: bool  # 0 and never rose: shown muted
    rate: str = ""  # "1,800 an hour over the last 5–10 min (limit 120)"; "" when not rising
    over: bool = False  # above its limit: the fabric rule fires on it


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
        counters=[_cell(name, port, judge.Checkpoint.of(port.rate_base)) for name in COUNTERS],
    )


def _cell(name: str, port: FabricPort, base: judge.Checkpoint | None) -> CounterCell:
    label = FABRIC_COUNTER_WORDS[name]
    counters, rises = port.counters, port.rises
    if name not in counters:
        return CounterCell(label, "unsupported", "", quiet=True)
    value, rise = int(counters[name]), int(rises.get(name, 0))
    shown = f"≥ {value:,} (saturated)" if saturated(name, value) else f"{value:,}"
    cell = CounterCell(
        label, shown, f"+{rise:,} since first seen" if rise else "", quiet=not value and not rise
    )
    limit = judge.RATE_BY_COUNTER.get(name)
    per_hour = judge.rate_per_hour(base, port.ts, rises, name)
    if limit is not None and per_hour:
        window = f"{judge.RATE_WINDOW_S / 60:g}–{2 * judge.RATE_WINDOW_S / 60:g} min"
        cell.rate = f"{per_hour:,.0f} an hour over the last {window} (limit {limit.per_hour:,.0f})"
        cell.over = judge.over_rate(name, per_hour)
    return cell
