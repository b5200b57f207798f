"""Stranded capacity per rack (fleet/read/capacity.py), on both database tiers: p95 and p99
of each rack's hourly draw — its PDU, else its nodes' meters, else its GPUs' power — equal
a pure-Python percentile_cont over the same seeded hours, stranded kW is budget − p99 and
never negative, GPUs that fit are counted at their max power limit, a rack whose budget is
spent while its GPUs idle is named, and GPUs capped below their limit count as held by the
budget only in a rack near it."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from fleet.models import Node
from fleet.read.capacity import THRESHOLDS, WINDOW_S, tier_for
from tests.support import databases
from tests.support.capacity_rows import Fleet, gpu_hours, in_window, node_hours, rack_hours
from tests.support.databases import T, TierDb

HOUR = 3600
HOURS = WINDOW_S // HOUR  # 720

db = databases.fresh_tier_db  # each test's own database, both tiers


def percentile_cont(values: Sequence[float], p: float) -> float:
    """The oracle: linear interpolation between the two nearest ranks (PostgreSQL's
    percentile_cont), by hand."""
    ordered = sorted(values)
    pos = p * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def test_a_month_is_read_from_hourly_means_by_default() -> None:
    # 1-minute means are kept 72 h: a 30-day p99 from them would be the last 3 days'
    assert tier_for(WINDOW_S) == "1h" and tier_for(HOUR) == "1m"


def test_p95_p99_and_stranded_kw_equal_the_oracle_for_every_power_source(db: TierDb) -> None:
    rng = random.Random(21)
    fleet = Fleet(db)
    # A: its PDU reports; its node's meter (ignored, as live) reads something else.
    metered = fleet.rack("A01", budget_kw=40)
    pdu = [(in_window(k), rng.uniform(8e3, 36e3)) for k in range(HOURS - 13)]  # gaps: fewer
    rack_hours(db, metered, pdu)
    # outside the window: an older hour, and the current hour (not yet whole)
    rack_hours(db, metered, [(T - (HOURS + 5) * HOUR, 1e6), (T - 1800, 1e6)])
    node_hours(db, fleet.node(metered, "a01-n1"), [(b, 1.0) for b, _ in pdu])
    # B: no PDU; two nodes with meters: their sum.
    summed = fleet.rack("B01", budget_kw=25)
    b1, b2 = fleet.node(summed, "b01-n1"), fleet.node(summed, "b01-n2")
    first = [(in_window(k), rng.uniform(4e3, 14e3)) for k in range(HOURS)]
    second = [(in_window(k), rng.uniform(4e3, 14e3)) for k in range(HOURS)]
    node_hours(db, b1, first)
    node_hours(db, b2, second)
    # C: no PDU; one node without a meter: the sum of the GPUs' power (as live).
    gpus_only = fleet.rack("C01", budget_kw=1.5)
    c1, c2 = fleet.node(gpus_only, "c01-n1", gpus=2), fleet.node(gpus_only, "c01-n2", gpus=1)
    node_hours(db, c1, [(in_window(k), 9e3) for k in range(HOURS)])
    node_hours(db, c2, [(in_window(k), None) for k in range(HOURS)])
    c_rows: dict[tuple[Node, int], list[tuple[int, float, float]]] = {
        (c1, 0): [],
        (c1, 1): [],
        (c2, 0): [],
    }
    for k in range(HOURS):
        for rows in c_rows.values():
            rows.append((in_window(k), rng.uniform(100, 700), 50.0))
    for (node, gpu), rows in c_rows.items():
        gpu_hours(db, node, gpu, rows)

    got = fleet.capacity()

    expected = {
        "A01": [w for _, w in pdu],
        "B01": [a + b for (_, a), (_, b) in zip(first, second, strict=True)],
        "C01": [sum(rows[k][1] for rows in c_rows.values()) for k in range(HOURS)],
    }
    for name, watts in expected.items():
        rack = got[name]
        p95, p99 = percentile_cont(watts, 0.95) / 1000, percentile_cont(watts, 0.99) / 1000
        assert rack.p95_kw == pytest.approx(p95), name
        assert rack.p99_kw == pytest.approx(p99), name
        assert rack.stranded_kw == pytest.approx(max(0.0, rack.budget_kw - p99)), name
        assert rack.covered_s == len(watts) * HOUR
    assert [got[n].source for n in ("A01", "B01", "C01")] == ["pdu", "nodes", "gpus"]
    assert got["C01"].source_words == "sum of GPU power only (an undercount)"
    assert got["C01"].stranded_kw == 0.0  # p99 over its budget: nothing stranded, never < 0
    # B has no GPUs: no model whose limit would count the GPUs that fit
    assert got["B01"].gpus == 0 and got["B01"].gpus_that_fit is None


def test_gpus_that_fit_count_at_their_max_power_limit_and_no_history_gives_none(
    db: TierDb,
) -> None:
    fleet = Fleet(db)
    rack = fleet.rack("A01", budget_kw=40)
    fleet.rack("NEW", budget_kw=30)
    fleet.node(rack, "a01-n1", gpus=8, limit_w=700)
    rack_hours(db, rack, [(in_window(k), 30e3) for k in range(HOURS)])
    racks = fleet.capacity()
    got, new = racks["A01"], racks["NEW"]
    assert got.stranded_kw == pytest.approx(10.0)
    assert (got.gpu_model, got.gpu_limit_w, got.gpus_that_fit) == ("H200", 700.0, 14)  # 10 kW / 0.7
    assert (new.p95_kw, new.p99_kw, new.stranded_kw, new.gpus_that_fit) == (None,) * 4
    assert new.source == "none" and not new.spent_while_idle and new.covered_s == 0


def test_a_rack_whose_budget_is_spent_while_its_gpus_idle_is_named(db: TierDb) -> None:
    fleet = Fleet(db)
    idle, busy, light = (fleet.rack(n, budget_kw=20) for n in ("IDLE", "BUSY", "LIGHT"))
    for rack, watts, util in ((idle, 19e3, 8.0), (busy, 19e3, 85.0), (light, 6e3, 8.0)):
        rack_hours(db, rack, [(in_window(k), watts) for k in range(HOURS)])
        node = fleet.node(rack, f"{rack.name}-n1", gpus=1)
        gpu_hours(db, node, 0, [(in_window(k), 600.0, util) for k in range(HOURS)])
    got = fleet.capacity()
    assert got["IDLE"].spent_while_idle  # p95 95 % of budget, 8 % utilisation
    assert not got["BUSY"].spent_while_idle  # the budget is spent on work
    assert not got["LIGHT"].spent_while_idle  # idle, but the budget is not spent
    assert got["IDLE"].mean_util_pct == pytest.approx(8.0)
    assert THRESHOLDS.spent_fraction * 20 <= 19 and THRESHOLDS.idle_util_pct > 8.0


def test_capped_gpus_are_held_by_the_budget_only_in_a_rack_near_it(db: TierDb) -> None:
    fleet = Fleet(db)
    tight, roomy = fleet.rack("TIGHT", budget_kw=10), fleet.rack("ROOMY", budget_kw=40)
    for rack in (tight, roomy):
        rack_hours(db, rack, [(in_window(k), 9.5e3) for k in range(HOURS)])
        node = fleet.node(rack, f"{rack.name}-n1", gpus=3, limit_w=700)
        db.store("gpu", (node.pk, 0), T - 60, power_limit_w=450.0)  # capped
        db.store("gpu", (node.pk, 1), T - 60, power_limit_w=699.5)  # its limit, rounded
        db.store("gpu", (node.pk, 2), T - 60, power_limit_w=700.0)
    got = fleet.capacity()
    assert (got["TIGHT"].capped_gpus, got["TIGHT"].held_by_budget) == (1, 1)
    assert (got["ROOMY"].capped_gpus, got["ROOMY"].held_by_budget) == (1, 0)
