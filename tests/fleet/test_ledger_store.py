"""The energy ledger kept per hour and day (fleet/read/ledger_store.py) on both engines, over
the ledger's seeded site (tests/support/ledger_seed.py): what the store answers for a window
is what `ledger()` computes from the rollup tiers for the same window — closed hours, the
open hour, a late rewrite — and its hours and days stay consistent."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from fleet.read import ledger_rules as r
from fleet.read.ledger import Ledger, Line, ledger
from fleet.read.ledger_rules import DEFAULT_RULES
from fleet.read.ledger_sql import Window
from fleet.read.ledger_store import progress, stored_ledger
from fleet.storage.ledger import keep
from fleet.storage.rollups import rollup
from tests.support.databases import T, TierDb, fresh_db
from tests.support.ledger_seed import Seed, rolled_up_to, seed

A, B = T, T + 7200  # the seeded window: two hours
LOOKBACK = DEFAULT_RULES.lookback_s


@dataclass
class Site:
    tdb: TierDb
    seed: Seed

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with connections[self.tdb.alias].cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []

    def rolled_up_to(self, minutes: int, hours: int) -> None:
        rolled_up_to(self.tdb.alias, minutes, hours)

    def keep(self, now: float) -> int:
        return keep(now, using=self.tdb.alias)


@pytest.fixture
def site(
    tier: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[Site]:
    with fresh_db(tier, tmp_path, tmp_path_factory, django_db_blocker) as tdb:
        yield Site(tdb, seed(tdb.alias, T))


def by_node(led: Ledger) -> dict[int, dict[str, Line]]:
    return {n.node_id: n.states for n in led.nodes}


def assert_same(got: Ledger, want: Ledger) -> None:
    """Every figure a page reads: per state, node and job, the pool, meters and price."""

    def figures(line: Line) -> list[float]:
        e = line.energy
        return [line.gpu_hours, e.gpu_kwh, e.node_kwh, e.overhead_kwh, line.estimated_hours,
                line.resets, line.hours_without_pue]  # fmt: skip

    def same(a: dict[str, Line], b: dict[str, Line], where: str) -> None:
        assert a.keys() == b.keys(), where
        for state in a:
            assert figures(a[state]) == pytest.approx(figures(b[state]), rel=1e-9, abs=1e-9), (
                where,
                state,
            )

    same(got.states, want.states, "site")
    assert by_node(got).keys() == by_node(want).keys()
    for node, states in by_node(want).items():
        same(by_node(got)[node], states, f"node {node}")
    assert [j.workload_id for j in got.jobs] == [j.workload_id for j in want.jobs]
    for g, w in zip(got.jobs, want.jobs, strict=True):
        same(g.states, w.states, f"job {w.key}")
        assert g.split == w.split
        assert g.price.carbon_kg == pytest.approx(w.price.carbon_kg, rel=1e-9)
        assert g.price.cost == pytest.approx(w.price.cost, rel=1e-9)
    assert got.pool.total_kwh == pytest.approx(want.pool.total_kwh, rel=1e-9)
    assert got.metered_facility_kwh == pytest.approx(want.metered_facility_kwh, rel=1e-9)
    assert got.reconcile_error_pct == pytest.approx(want.reconcile_error_pct, abs=1e-9)
    assert got.price.cost == pytest.approx(want.price.cost, rel=1e-9)


def test_closed_hours_read_back_as_the_ledger_computed_from_the_minutes(site: Site) -> None:
    site.rolled_up_to(minutes=B + LOOKBACK, hours=B)
    assert site.keep(now=B + LOOKBACK + 60) >= 2
    assert progress(site.seed.site_id, site.tdb.alias).closed_until == B  # type: ignore[union-attr]
    window = Window(site.seed.site_id, A, B)
    assert_same(stored_ledger(window, site.tdb.alias), ledger(window, using=site.tdb.alias))
    # what the page shows: the empty allocation idles, the pool has the unallocated GPU
    got = stored_ledger(window, site.tdb.alias)
    assert got.states[r.ALLOCATED_IDLE].gpu_hours == pytest.approx(2.0)
    assert got.states[r.UNALLOCATED].gpu_hours == pytest.approx(2.0)


def test_an_hour_not_closed_yet_is_stored_up_to_the_newest_minute(site: Site) -> None:
    newest = A + 3600 + 1800  # half-way through the second hour
    site.rolled_up_to(minutes=newest, hours=A + 3600)
    site.keep(now=newest + 30)
    stored = progress(site.seed.site_id, site.tdb.alias)
    assert stored is not None
    assert stored.closed_until == A + 3600  # closed: the minutes reach its lookback
    assert stored.open_until == newest
    window = Window(site.seed.site_id, A, newest)
    assert_same(stored_ledger(window, site.tdb.alias), ledger(window, using=site.tdb.alias))


def test_the_open_hour_is_not_computed_again_for_each_new_minute(site: Site) -> None:
    site.rolled_up_to(minutes=A + 1200, hours=A)
    site.keep(now=A + 1230)
    site.rolled_up_to(minutes=A + 1260, hours=A)
    site.keep(now=A + 1290)
    assert progress(site.seed.site_id, site.tdb.alias).open_until == A + 1200  # type: ignore[union-attr]
    site.rolled_up_to(minutes=A + 1320, hours=A)
    site.keep(now=A + 1350)
    assert progress(site.seed.site_id, site.tdb.alias).open_until == A + 1320  # type: ignore[union-attr]


def test_a_late_rewrite_of_a_closed_hour_is_computed_again(site: Site) -> None:
    site.rolled_up_to(minutes=B + LOOKBACK, hours=B)
    site.keep(now=B + LOOKBACK + 60)
    node, gpu = site.seed.where["training"]
    # late rows: the training GPU idled through the first hour after all
    site.query(
        "UPDATE fw_gpu_1m SET util_gpu_pct_mean = 0, util_gpu_pct_max = 0, power_w_mean = 70"
        " WHERE node_id = %s AND gpu = %s AND bucket >= %s AND bucket < %s",
        [node, gpu, A, A + 3600],
    )
    window = Window(site.seed.site_id, A, B)
    before = stored_ledger(window, site.tdb.alias)
    # what the hourly rollup leaves when it recomputes a node's hour (tests below)
    site.query("INSERT INTO fw_ledger_late (node_id, hour) VALUES (%s, %s)", [node, A])
    site.keep(now=B + LOOKBACK + 120)
    after = stored_ledger(window, site.tdb.alias)
    assert_same(after, ledger(window, using=site.tdb.alias))
    assert after.states[r.ALLOCATED_IDLE].gpu_hours > before.states[r.ALLOCATED_IDLE].gpu_hours
    assert site.query("SELECT COUNT(*) FROM fw_ledger_late") == [(0,)]


def test_the_hourly_rollup_of_late_rows_marks_the_ledger_hours_around_them(site: Site) -> None:
    site.rolled_up_to(minutes=B + LOOKBACK, hours=B)
    node, gpu = site.seed.where["training"]
    site.query(
        "INSERT INTO fw_gpu_late (node_id, gpu, tier, bucket) VALUES (%s, %s, '1h', %s)",
        [node, gpu, A + 3600],
    )
    rollup("1h", "gpu", now=B + LOOKBACK + 60, using=site.tdb.alias)
    marks = site.query("SELECT node_id, site_id, hour FROM fw_ledger_late ORDER BY hour")
    assert marks == [(node, None, A), (node, None, A + 3600), (node, None, A + 7200)]


def test_keeping_again_changes_nothing_and_days_add_up_to_their_hours(site: Site) -> None:
    site.rolled_up_to(minutes=B + LOOKBACK, hours=B)
    site.keep(now=B + LOOKBACK + 60)
    first = site.query("SELECT * FROM fw_ledger_1h ORDER BY bucket, node_id, workload_id, state")
    site.query("UPDATE fw_ledger_state SET open_until = closed_until")  # as if never opened
    site.keep(now=B + LOOKBACK + 120)
    again = site.query("SELECT * FROM fw_ledger_1h ORDER BY bucket, node_id, workload_id, state")
    assert again == first
    hours = site.query(
        "SELECT node_id, workload_id, state, SUM(gpu_s), SUM(gpu_j) FROM fw_ledger_1h"
        " GROUP BY node_id, workload_id, state ORDER BY 1, 2, 3"
    )
    days = site.query(
        "SELECT node_id, workload_id, state, SUM(gpu_s), SUM(gpu_j) FROM fw_ledger_1d"
        " GROUP BY node_id, workload_id, state ORDER BY 1, 2, 3"
    )
    assert [row[:3] for row in days] == [row[:3] for row in hours]
    for d, h in zip(days, hours, strict=True):
        assert d[3:] == pytest.approx(h[3:], rel=1e-9)


def test_a_window_of_whole_days_reads_the_daily_rows(site: Site) -> None:
    site.rolled_up_to(minutes=B + LOOKBACK, hours=B)
    site.keep(now=B + LOOKBACK + 60)
    # the hourly rows gone: only the daily ones can answer for a whole day
    day = A - A % 86_400
    site.query("DELETE FROM fw_ledger_1h")
    got = stored_ledger(Window(site.seed.site_id, day, day + 86_400), site.tdb.alias)
    assert got.states[r.UNALLOCATED].gpu_hours == pytest.approx(
        stored_hours(site, r.UNALLOCATED, day)
    )
    assert got.states[r.UNALLOCATED].gpu_hours >= 2.0


def stored_hours(site: Site, state: str, day: int) -> float:
    [(seconds,)] = site.query(
        "SELECT SUM(gpu_s) FROM fw_ledger_1d WHERE state = %s AND bucket = %s", [state, day]
    )
    return float(seconds) / 3600
