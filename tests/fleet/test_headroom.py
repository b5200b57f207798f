"""A site's headroom by rack (fleet/read/headroom.py) on both database tiers: each rack's
room on every constraint and the servers of a model that fit agree with `can_take` asked
about that rack (the oracle: one owner of the figures), the racks with least room come
first, and the site is read in the same number of statements whatever its number of racks.
"""

from __future__ import annotations

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from fleet.read.capacity_answer import can_take
from fleet.read.headroom import known_models, site_headroom
from fleet.read.rack_room import ServerPower
from tests.support import databases
from tests.support.capacity_rows import HGX, AnswerSite
from tests.support.databases import T, TierDb

db = databases.fresh_tier_db  # each test's own database, both tiers

MEASURED = ServerPower(10e3, "measured")  # the answer site's HGX node


def shaped_site(db: TierDb) -> AnswerSite:
    """Racks each bound by one constraint for an HGX server (10 kW, 8U), and one without
    a measured draw."""
    site = AnswerSite(db)
    site.rack("P01", budget_kw=45, draw_kw=20, units=(1,))  # budget: 2 fit, 25 kW room
    site.rack("F01", budget_kw=45, draw_kw=20, feed_amps=(63, 63))  # N+1: 1 fit
    cdu = site.loop(capacity_kw=60)
    site.rack("C01", budget_kw=45, draw_kw=25, loop=cdu)  # CDU 60 − 45: 1 fit, 15 kW
    site.rack("C02", budget_kw=45, draw_kw=20, loop=cdu)
    site.rack("S01", budget_kw=200, draw_kw=20, units=(1, 9, 17, 25, 33))  # space: 0 fit
    return site


def test_each_racks_room_and_fit_agree_with_can_take(db: TierDb) -> None:
    site_id = shaped_site(db).site.pk
    headroom = site_headroom(site_id, HGX, MEASURED, 8, T, using=db.alias)
    assert len(headroom.racks) == 6
    for row in headroom.racks:
        answer = can_take(row.rack_id, 1, HGX, T, using=db.alias)
        assert answer.server_w == MEASURED.w
        ours = [(c.name, c.room, c.fits, c.detail) for c in row.constraints]
        theirs = [(c.name, c.room, c.fits, c.detail) for c in answer.constraints]
        assert ours == theirs, row.rack
        assert row.fits == (None if answer.yes is None else answer.binding.fits)  # type: ignore[union-attr]
        assert (row.binding and row.binding.name) == (answer.binding and answer.binding.name)


def test_the_racks_with_least_room_come_first(db: TierDb) -> None:
    site = shaped_site(db)
    headroom = site_headroom(site.site.pk, HGX, MEASURED, 8, T, using=db.alias)
    order = [(r.rack, r.fits, r.binding and r.binding.name) for r in headroom.racks]
    assert order == [
        ("S01", 0, "space"),
        ("C01", 1, "CDU heat"),  # 15 kW of the CDU's room, shared with C02
        ("C02", 1, "CDU heat"),
        ("F01", 1, "feed N+1"),  # 36.2 − 20 = 16.2 kW: more room than the CDU's 15
        ("P01", 2, "power budget"),
        ("M01", 4, "space"),  # the measured node's rack: 34 U free, 90 kW under budget
    ]
    c02 = headroom.racks[2]
    cdu = c02.room("CDU heat")
    assert cdu is not None and cdu.room == pytest.approx(15.0)
    assert c02.room("feed N+1") is not None and c02.room("space") is not None


def test_a_rack_without_measured_draw_comes_last_with_no_fit(db: TierDb) -> None:
    site = shaped_site(db)
    site.bare_rack("Z01", budget_kw=45)
    headroom = site_headroom(site.site.pk, HGX, MEASURED, 8, T, using=db.alias)
    last = headroom.racks[-1]
    assert (last.rack, last.fits, last.p99_kw) == ("Z01", None, None)


def test_the_site_is_read_in_the_same_statements_for_more_racks(db: TierDb) -> None:
    site = shaped_site(db)
    site_id = site.site.pk

    def statements() -> int:
        with CaptureQueriesContext(connections[db.alias]) as seen:
            site_headroom(site_id, HGX, MEASURED, 8, T, using=db.alias)
        return len(seen.captured_queries)

    few = statements()
    for k in range(10):
        site.rack(f"X{k:02d}", budget_kw=45, draw_kw=5, feed_amps=(63, 63), units=(1,))
    assert statements() == few


def test_the_sites_models_carry_their_measured_or_rated_power(db: TierDb) -> None:
    site = shaped_site(db)
    models = {k.name: k for k in known_models(site.site.pk, T, using=db.alias)}
    hgx = models[HGX]
    assert hgx.power == MEASURED and hgx.units == 8 and hgx.nodes == 7
    h100 = models["HGX H100 8-GPU"]
    assert (h100.power, h100.nodes) == (ServerPower(10_200.0, "rated"), 0)
    assert models["GB200 NVL72 compute tray"].power is None
    assert next(iter(models)) == HGX  # the site's most common model first
