"""A rack's draw per bucket (fleet/read/capacity_sql.rack_series_sql), on both database
tiers, where its PDU reports in only some buckets: the PDU's value where it reported, its
nodes' meters in the other buckets, whether the window starts on a bucket's edge or inside
one; and every node's own draw (`per_node`, the capacity answer's measured server power)
still read in the buckets the PDU answers for."""

from __future__ import annotations

from django.db import connections

from fleet.read.capacity_sql import rack_series_params, rack_series_sql
from fleet.read.forecast_sources import rack_power
from tests.support import databases
from tests.support.capacity_rows import Fleet, in_window, node_hours, rack_hours
from tests.support.databases import T, TierDb

HOUR = 3600
db = databases.fresh_tier_db  # each test's own database, both tiers


def hourly_kw(db: TierDb, fleet: Fleet, since: float) -> dict[int, list[float]]:
    """Each rack's draw (kW) per whole hour in [since, T), oldest first."""
    return {
        rack: [kw for _, kw in points]
        for rack, points in rack_power(fleet.site.pk, since, T, "1h", db.alias).items()
    }


def test_a_rack_takes_its_nodes_meters_in_the_hours_its_pdu_missed(db: TierDb) -> None:
    fleet = Fleet(db)
    rack = fleet.rack("P01", budget_kw=40)
    rack_hours(db, rack, [(in_window(k), 10e3) for k in (0, 1, 3)])  # missed 2, 4 and 5
    for name, w in (("p01-n1", 3e3), ("p01-n2", 4e3)):
        node_hours(db, fleet.node(rack, name), [(in_window(k), w) for k in range(6)])

    got = hourly_kw(db, fleet, in_window(5))

    # oldest first: hours 5, 4, 3, 2, 1, 0
    assert got == {rack.pk: [7.0, 7.0, 10.0, 7.0, 10.0, 10.0]}


def test_a_pdu_that_missed_only_the_oldest_hour_leaves_it_to_the_nodes(db: TierDb) -> None:
    fleet = Fleet(db)
    rack = fleet.rack("Q01", budget_kw=40)
    # every hour but the window's oldest, and rows outside it (older; the unfinished hour)
    rack_hours(db, rack, [(in_window(k), 10e3) for k in range(5)])
    rack_hours(db, rack, [(in_window(9), 1e6), (T, 1e6)])
    node_hours(db, fleet.node(rack, "q01-n1"), [(in_window(k), 6e3) for k in range(6)])

    on_edge = hourly_kw(db, fleet, in_window(5))
    inside = hourly_kw(db, fleet, in_window(6) + HOUR // 2)  # hour 6 is not whole

    assert on_edge == inside == {rack.pk: [6.0, 10.0, 10.0, 10.0, 10.0, 10.0]}


def test_every_node_keeps_its_own_draw_where_the_pdu_answers(db: TierDb) -> None:
    fleet = Fleet(db)
    rack = fleet.rack("R01", budget_kw=40)
    rack_hours(db, rack, [(in_window(k), 10e3) for k in range(6)])
    node = fleet.node(rack, "r01-n1")
    node_hours(db, node, [(in_window(k), 6e3) for k in range(6)])
    sql = "WITH " + rack_series_sql("1h") + "SELECT node_id, meter FROM per_node"

    with connections[db.alias].cursor() as cur:
        cur.execute(sql, rack_series_params(fleet.site.pk, in_window(5), T))
        per_node = cur.fetchall()

    assert hourly_kw(db, fleet, in_window(5)) == {rack.pk: [10.0] * 6}
    assert sorted(per_node) == [(node.pk, 6e3)] * 6
