"""The latest state of bench/rules.py's inventory: what each GPU, node, rack, feed, loop
and the site reports (a busy, mostly healthy fleet, a few hundred entities breaching
warning-level rules), written through the ingest's one write path, and kept fresh."""

from __future__ import annotations

from typing import Any

# RACKS and NODES through the module, read at call time: benches that scale the
# inventory set them there (bench/freshness_page.py, bench/scale.py).
from bench import rules_inventory as plan
from bench.rules_inventory import (
    GPUS_PER_NODE,
    POWER_MAX_W,
    RACK_BUDGET_KW,
    RACKS_PER_LOOP,
    Inventory,
    nodes_in_rack,
)

SW_POWER_CAP, SW_THERMAL = 0x4, 0x20  # NVML clock-event reason bits (agents/protocol/reasons)


def gpu_sample(node_i: int, g: int) -> dict[str, Any]:
    """A busy, healthy H200; every 50th GPU runs hot (headroom 8 °C: warning), and 50
    GPUs each have HBM near its limit, the SW-thermal bit, or power-capped low clocks."""
    n = node_i * GPUS_PER_NODE + g
    s: dict[str, Any] = {
        "util_gpu_pct": 97.0,
        "util_mem_pct": 40.0,
        "mem_used_mib": 120_000.0,
        "mem_total_mib": 143_771.0,
        "temp_gpu_c": 55.0 + n % 20,
        "temp_mem_c": 70.0,
        "power_w": 650.0,
        "power_instant_w": 662.0,
        "power_limit_w": POWER_MAX_W,
        "clock_sm_mhz": 1980.0,
        "clock_mem_mhz": 2619.0,
        "pstate": 0,
        "clock_event_reasons": SW_POWER_CAP,  # normal under load
        "remap_pending": 0,
        "remap_failure": 0,
        "nvlink_up": 18,
        "fan_pct": 0.0,
        "pcie_tx_kib_s": 100.0,
        "pcie_rx_kib_s": 100.0,
    }
    if gpu_hot(n):
        s["temp_gpu_c"] = 79.0
    if n % 200 == HBM_HOT:
        s["temp_mem_c"] = 91.0
    if n % 200 == SW_THERMAL_SET:
        s["clock_event_reasons"] = SW_POWER_CAP | SW_THERMAL
    if n % 200 == CLOCKS_CAPPED:
        s["clock_sm_mhz"] = 1300.0
    return s


# Who breaches (warning rules only): the GPU, node, rack and loop predicates the samples
# follow, also used to find a node whose rack and loop have no alert at all.
HBM_HOT, SW_THERMAL_SET, CLOCKS_CAPPED = 7, 13, 19
PUMP_FAILED_LOOP, DELTA_COLLAPSED_LOOP = 7, 13


def gpu_hot(n: int) -> bool:
    return n % 50 == 0


def gpu_breaches(n: int) -> bool:
    return gpu_hot(n) or n % 200 in (HBM_HOT, SW_THERMAL_SET, CLOCKS_CAPPED)


def node_hot(node_i: int) -> bool:
    return node_i % 31 == 0


def rack_power_high(rack_i: int) -> bool:
    return rack_i % 25 == 0


def rack_hot(rack_i: int) -> bool:
    return rack_i % 25 == 12


def rack_node_indices() -> list[range]:
    """Per rack, in plan order, the indices of its nodes in `Inventory.nodes`."""
    out, start = [], 0
    for r in range(plan.RACKS):
        out.append(range(start, start + nodes_in_rack(r)))
        start += nodes_in_rack(r)
    return out


def quiet_node(inv: Inventory) -> int:
    """A node in a rack, on a loop, where nothing else alerts: its alert is a group of its
    own (fleet/alerts/grouping.py), so its first message is not held back as an update of
    a group already announced."""
    for r, nodes in enumerate(rack_node_indices()):
        loop_i = r // RACKS_PER_LOOP
        noisy = rack_power_high(r) or rack_hot(r)
        noisy = noisy or loop_i in (PUMP_FAILED_LOOP, DELTA_COLLAPSED_LOOP)
        noisy = noisy or any(
            node_hot(i) or any(gpu_breaches(i * GPUS_PER_NODE + g) for g in range(GPUS_PER_NODE))
            for i in nodes
        )
        if not noisy:
            return inv.nodes[nodes[0]]
    raise RuntimeError("no quiet rack in the plan")


def node_sample(node_i: int) -> dict[str, Any]:
    """Inlet 22–26 °C; every 31st node at 28.5 °C (recommended limit: warning)."""
    inlet = 28.5 if node_hot(node_i) else 22.0 + node_i % 5
    return {
        "cpu_pct": 35.0,
        "load1": 24.0,
        "mem_used_mib": 900_000.0,
        "mem_total_mib": 2_000_000.0,
        "temp_cpu_c": 55.0,
        "temp_inlet_c": inlet,
        "temp_outlet_c": inlet + 12.0,
        "power_w": 6_500.0,
        "disk_read_bytes_s": 1e6,
        "disk_write_bytes_s": 2e6,
        "net_rx_bytes_s": 1e9,
        "net_tx_bytes_s": 1e9,
    }


def rack_power_w(rack_i: int) -> float:
    """Its nodes' 6.5 kW each; every 25th rack at 92.5 % of budget (warning)."""
    if rack_power_high(rack_i):
        return 0.925 * RACK_BUDGET_KW * 1000
    return nodes_in_rack(rack_i) * 6_500.0 + 800.0


def rack_sample(rack_i: int) -> dict[str, Any]:
    inlet = 28.0 if rack_hot(rack_i) else 23.0  # 20 racks over the recommended 27 °C
    return {
        "power_w": rack_power_w(rack_i),
        "temp_inlet_c": inlet,
        "temp_outlet_c": inlet + 14.0,
        "humidity_pct": 45.0,
        "liquid_supply_c": 28.0,
        "liquid_return_c": 38.0,
        "liquid_flow_lpm": 20.0,
        "liquid_dp_kpa": 80.0,
        "leak": 0,
    }


def loop_sample(loop_i: int) -> dict[str, Any]:
    """A W32 loop at 28 °C supply, 83 % of rated flow; one has a failed pump and one a
    collapsed ΔT (warnings)."""
    return {
        "supply_c": 28.0,
        "return_c": 28.8 if loop_i == DELTA_COLLAPSED_LOOP else 38.0,
        "delta_c": 0.8 if loop_i == DELTA_COLLAPSED_LOOP else 10.0,
        "flow_lpm": 500.0,
        "supply_kpa": 300.0,
        "return_kpa": 200.0,
        "dp_kpa": 100.0,
        "heat_removed_kw": 700.0,
        "primary_supply_c": 20.0,
        "primary_return_c": 30.0,
        "primary_flow_lpm": 700.0,
        "pump_speed_pct": 60.0,
        "pumps_running": 2,
        "pumps_failed": 1 if loop_i == PUMP_FAILED_LOOP else 0,
        "leak": 0,
        "reservoir_low": 0,
    }


def fill_latest(inv: Inventory, at: float) -> int:
    """Every entity's latest state through the one write path (`merge_latest`, bulk
    upserts), as the ingest child writes it; returns the rows written."""
    from django.conf import settings

    from fleet.storage.db import open_db
    from fleet.storage.latest import LatestDelta, merge_latest

    delta = LatestDelta()
    for i, node_id in enumerate(inv.nodes):
        delta.add("node", (node_id,), {"ts": at, **node_sample(i)}, at)
        for g in range(GPUS_PER_NODE):
            delta.add("gpu", (node_id, g), {"ts": at, "gpu": g, **gpu_sample(i, g)}, at)
    for i, rack_id in enumerate(inv.racks):
        delta.add("rack", (rack_id,), {"ts": at, **rack_sample(i)}, at)
    power = {rack_id: rack_power_w(i) for i, rack_id in enumerate(inv.racks)}
    for feed_id, rack_id in inv.feeds:
        half = power[rack_id] / 2  # two primary feeds share the rack
        sample = {"ts": at, "power_w": half, "voltage_v": 415.0, "current_a": half / 415 / 1.732}
        delta.add("feed", (feed_id,), sample, at)
    for i, loop_id in enumerate(inv.loops):
        delta.add("loop", (loop_id,), {"ts": at, **loop_sample(i)}, at)
    it_w = plan.NODES * 6_500.0
    facility = {"ts": at, "total_power_w": it_w * 1.35, "it_power_w": it_w, "pue_category": 1}
    delta.add("facility", (inv.site_id,), {**facility, "outdoor_c": 15.0}, at)
    rows = len(delta)
    db = open_db(dict(settings.DATABASES["default"]))
    try:
        db.transaction(lambda tx: merge_latest(tx, delta))
    finally:
        db.close()
    return rows


def refresh_statements() -> list[tuple[str, int]]:
    """Per latest table: an UPDATE moving `ts` and every field's sample time to one
    parameter (values unchanged; a time beside a NULL value is never read), and how
    many parameters it takes."""
    from fleet.storage.latest import metric_names
    from fleet.storage.schema import ENTITY_COLUMNS, field_ts_column, latest_table

    out = []
    for kind in ENTITY_COLUMNS:
        cols = ["ts", *(field_ts_column(n) for n in metric_names(kind))]
        sets = ", ".join(f"{c} = %s" for c in cols)
        out.append((f"UPDATE {latest_table(kind)} SET {sets}", len(cols)))
    return out


def refresh(at: float, latest: bool = True) -> None:
    """Make the latest state (and every agent's last batch) fresh as of `at`, as a live
    fleet keeps it: the values stay, their sample times move."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cur:
        if latest:
            for sql, n in refresh_statements():
                cur.execute(sql, [at] * n)
        cur.execute("UPDATE fleet_sourcetoken SET last_seen = %s", [at])
