"""The health record's tier statements on both engines: a reset or driver reload is found in
the bucket where any of its counters went down (at the bucket's edge or inside it), and
nowhere else; thermal slowdown time is the larger of the SW and HW counters' increase (a
restarted counter counts from zero), excursions are runs of hours past the GPU's slowdown
limit in force, absent where it has none."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.models import GPU, Hall, Node, Rack, Site
from fleet.read.health_record_sql import resets_sql, thermal_sql
from tests.support import databases
from tests.support.databases import T, TierDb

tdb = databases.fresh_db_at_test_clock
HOUR = 3600


def gpus(db: TierDb) -> tuple[int, int]:
    """A node with GPU 0 (slowdown 87 °C, entered) and GPU 1 (no limit known)."""
    using = db.alias
    site = Site.objects.using(using).create(slug="s", name="S")
    hall = Hall.objects.using(using).create(site=site, name="H")
    rack = Rack.objects.using(using).create(hall=hall, name="R", cooling="air", power_budget_kw=9)
    node = Node.objects.using(using).create(name="n1", rack=rack)
    GPU.objects.using(using).create(node=node, index=0, slowdown_c=87.0, reported_slowdown_c=90.0)
    GPU.objects.using(using).create(node=node, index=1)
    return node.id, site.id


def rows(db: TierDb, tier: str, node: int, gpu: int, series: list[dict[str, Any]]) -> None:
    step = 60 if tier == "1m" else HOUR
    start = T - 5 * HOUR
    names = sorted({k for values in series for k in values})
    columns = ("node_id", "gpu", "bucket", "n", *names)
    db.insert(
        f"fw_gpu_{tier}",
        columns,
        [
            (node, gpu, start + i * step, 1, *(v.get(k) for k in names))
            for i, v in enumerate(series)
        ],
    )


def stat(value: float, low: float | None = None) -> dict[str, float]:
    return {"min": value if low is None else low, "max": value, "last": value}


def counter(
    name: str, value: float, low: float | None = None, last: float | None = None
) -> dict[str, float]:
    s = stat(value, low)
    if last is not None:
        s["last"] = last
    return {f"{name}_{k}": v for k, v in s.items()}


def test_resets_are_found_where_a_counter_went_down_on_both_engines(tdb: TierDb) -> None:
    node, _ = gpus(tdb)
    series = [
        {**counter("energy_j", 1000), **counter("ecc_sbe_vol_total", 5)},
        {**counter("energy_j", 2000), **counter("ecc_sbe_vol_total", 5)},
        {**counter("energy_j", 10, low=10), **counter("ecc_sbe_vol_total", 0)},  # reload: edge
        {**counter("energy_j", 900, low=20), **counter("ecc_sbe_vol_total", 0)},
        # inside the bucket: up to 1,500, then a reset, last 30
        {**counter("energy_j", 1500, low=30, last=30), **counter("ecc_sbe_vol_total", 0)},
        {**counter("energy_j", 1000), **counter("remap_pending", 1)},
        {**counter("energy_j", 2000), **counter("remap_pending", 0)},  # a reset cleared it
        {**counter("energy_j", 3000)},  # nothing known of the flag: no reset
    ]
    rows(tdb, "1m", node, 0, series)
    start = T - 5 * HOUR
    found = tdb.execute(resets_sql("1m", [node], start, T))
    assert [b for _, _, b in found] == [start + 120, start + 240, start + 360]
    # the window's own edge: the first bucket read has nothing before it to fall from
    assert [b for _, _, b in tdb.execute(resets_sql("1m", [node], start + 180, T))] == [
        start + 240,
        start + 360,
    ]
    assert tdb.execute(resets_sql("1m", [node + 1], start, T)) == []


def test_thermal_time_and_excursions_on_both_engines(tdb: TierDb) -> None:
    node, _ = gpus(tdb)
    s = 1e9 * 60  # a minute, in ns
    hot = [
        {**counter("slowdown_hw_thermal_ns", 10 * s, low=0), **counter("slowdown_sw_thermal_ns", 0),
         "temp_gpu_c_max": 86.0},
        {**counter("slowdown_hw_thermal_ns", 30 * s), **counter("slowdown_sw_thermal_ns", 5 * s),
         "temp_gpu_c_max": 87.0},  # at the entered limit (87, not the reported 90): hot
        {**counter("slowdown_hw_thermal_ns", 40 * s), **counter("slowdown_sw_thermal_ns", 30 * s),
         "temp_gpu_c_max": 89.0},  # the SW counter rose more: 25 min, not 10 + 25
        {**counter("slowdown_hw_thermal_ns", 5 * s), **counter("slowdown_sw_thermal_ns", 31 * s),
         "temp_gpu_c_max": 80.0},  # HW counter restarted: 5 min
        {"temp_gpu_c_max": 95.0},
    ]  # fmt: skip
    rows(tdb, "1h", node, 0, hot)
    rows(tdb, "1h", node, 1, [{"temp_gpu_c_max": 99.0}, {"temp_gpu_c_max": 99.0}])
    start = T - 5 * HOUR
    got = {g: r for _, g, *r in tdb.execute(thermal_sql([node], start, T))}
    ns, runs, hours = got[0]
    assert float(ns) == pytest.approx((10 + 20 + 25 + 5) * s)
    assert (int(runs), int(hours)) == (2, 3)
    assert got[1][0] is None and got[1][1] is None  # no counters, no limit: absent
