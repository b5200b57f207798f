"""The fleet overview's figures, read from the latest-state tables (never history).

Per rack: live power against budget, and its hottest GPU's headroom to that
GPU's own slowdown limit. The page's JavaScript applies the same rules to the
per-node updates it is pushed (static/dashboard/fleet.js).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import connection

from fleet.ingest.inventory import GpuLimits
from fleet.ingest.writer_core import summarize_node
from fleet.models import Node, Rack
from fleet.storage.schema import latest_table

STALE_AFTER_S = 30.0


@dataclass
class RackView:
    id: int
    name: str
    hall: str
    cooling: str
    cooling_label: str
    budget_kw: float
    nodes: list[int] = field(default_factory=list)
    power_kw: float | None = None
    power_source: str = "none"  # "pdu", "nodes", "gpus" or "none"
    min_headroom_c: float | None = None
    max_temp_c: float | None = None
    ts: float | None = None

    @property
    def utilisation_pct(self) -> float | None:
        if self.power_kw is None or not self.budget_kw:
            return None
        return 100.0 * self.power_kw / self.budget_kw


def _select(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def node_summaries() -> dict[int, dict[str, Any]]:
    """Per node: GPU power, hottest GPU, least headroom, node power — as the writer pushes."""
    from fleet.ingest.store import latest_columns

    limits = {
        (node_id, index): GpuLimits(slowdown, tlimit)
        for node_id, index, slowdown, tlimit in _select(
            'SELECT node_id, "index", slowdown_c, tlimit_slowdown_c FROM fleet_gpu'
        )
    }
    gpu_cols = latest_columns("gpu")
    per_node: dict[int, list[tuple[tuple[int, ...], dict[str, Any]]]] = {}
    for rec in _select(f"SELECT {', '.join(gpu_cols)} FROM {latest_table('gpu')}"):
        sample = dict(zip(gpu_cols, rec, strict=True))
        per_node.setdefault(rec[0], []).append(((rec[0], rec[1]), sample))
    node_cols = latest_columns("node")
    node_rows: dict[int, dict[str, Any]] = {}
    for rec in _select(f"SELECT {', '.join(node_cols)} FROM {latest_table('node')}"):
        node_rows[rec[0]] = dict(zip(node_cols, rec, strict=True))
    out: dict[int, dict[str, Any]] = {}
    for node_id in set(per_node) | set(node_rows):
        out[node_id] = summarize_node(per_node.get(node_id, []), node_rows.get(node_id), limits)
    return out


def rack_power() -> dict[int, tuple[float, float]]:
    """Measured rack power (W) and its time, from rack collectors (PDUs)."""
    return {
        rack_id: (power, ts)
        for rack_id, ts, power in _select(
            f"SELECT rack_id, ts, power_w FROM {latest_table('rack')} WHERE power_w IS NOT NULL"
        )
    }


def fleet_overview(now: float) -> tuple[list[RackView], dict[int, dict[str, Any]], dict[int, Any]]:
    racks: dict[int, RackView] = {}
    for rack in Rack.objects.select_related("hall").order_by("hall__name", "position", "name"):
        racks[rack.id] = RackView(
            rack.id,
            rack.name,
            rack.hall.name,
            rack.cooling,
            rack.get_cooling_display(),
            rack.power_budget_kw,
        )
    for node_id, rack_id in Node.objects.values_list("id", "rack_id"):
        if rack_id in racks:
            racks[rack_id].nodes.append(node_id)
    nodes = node_summaries()
    pdu = rack_power()
    apply_live(racks, nodes, pdu, now)
    return list(racks.values()), nodes, pdu


def apply_live(
    racks: dict[int, RackView],
    nodes: dict[int, dict[str, Any]],
    pdu: dict[int, tuple[float, float]],
    now: float,
) -> None:
    for rack in racks.values():
        summaries = [nodes[n] for n in rack.nodes if n in nodes]
        fresh = [s for s in summaries if s.get("ts") and now - s["ts"] < STALE_AFTER_S]
        heads = [s["min_headroom_c"] for s in fresh if s.get("min_headroom_c") is not None]
        temps = [s["max_temp_c"] for s in fresh if s.get("max_temp_c") is not None]
        rack.min_headroom_c = min(heads) if heads else None
        rack.max_temp_c = max(temps) if temps else None
        rack.ts = max((s["ts"] for s in fresh), default=None)
        measured = pdu.get(rack.id)
        if measured is not None and now - measured[1] < STALE_AFTER_S:
            rack.power_kw, rack.power_source = measured[0] / 1000, "pdu"
            rack.ts = max(rack.ts or 0, measured[1])
        elif fresh and all(s.get("power_w") is not None for s in fresh):
            rack.power_kw = sum(s["power_w"] for s in fresh) / 1000
            rack.power_source = "nodes"
        elif fresh:
            rack.power_kw = sum(s.get("gpu_power_w") or 0 for s in fresh) / 1000
            rack.power_source = "gpus"


def overview_payload(
    racks: list[RackView], nodes: dict[int, dict[str, Any]], pdu: dict[int, Any], now: float
) -> dict[str, Any]:
    """The page's initial state for fleet.js, which then applies pushed updates."""
    return {
        "now": now,
        "racks": [asdict(r) for r in racks],
        "nodes": {str(k): v for k, v in nodes.items()},
        "pdu": {str(k): {"p": p, "ts": ts} for k, (p, ts) in pdu.items()},
        "stale_after_s": STALE_AFTER_S,
    }
