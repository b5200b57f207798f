"""Capacity answers (fleet/read/capacity_answer.py): "can rack X take N more servers of
model M?" on both database tiers — a rack bound by its power budget, one by its feeds less
any one (N+1), one by its CDU's heat capacity with another rack on the loop, one by free
rack units; the per-server power measured from the site's nodes of the model, else rated,
else given; and questions that cannot be answered."""

from __future__ import annotations

import pytest

from fleet.models import Rack
from fleet.read.capacity_answer import CapacityQuestionError, can_take
from tests.support import databases
from tests.support.capacity_rows import HGX
from tests.support.capacity_rows import AnswerSite as Site1
from tests.support.databases import T, TierDb

db = databases.fresh_tier_db  # each test's own database, both tiers


def test_a_rack_bound_by_its_power_budget(db: TierDb) -> None:
    site = Site1(db)
    rack = site.rack("A01", budget_kw=45, draw_kw=20, units=(1,))
    no = can_take(rack.pk, 3, HGX, T, using=db.alias)
    assert no.yes is False and no.binding is not None and no.binding.name == "power budget"
    assert no.server_w == pytest.approx(10e3) and no.server_w_from == "measured"
    assert no.p99_kw == pytest.approx(20)
    assert no.binding.fits == 2 and no.binding.margin == pytest.approx(45 - 20 - 30)
    yes = can_take(rack.pk, 2, HGX, T, using=db.alias)
    assert yes.yes is True and yes.constraints[0].margin == pytest.approx(5)
    space = yes.constraints[-1]
    assert (space.name, space.used, space.fits) == ("space", 8, 4)  # U9–U40: 4 × 8U


def test_a_rack_bound_by_its_feeds_less_any_one(db: TierDb) -> None:
    site = Site1(db)
    # two 63 A feeds: either alone carries 36.2 kW, under the 45 kW budget
    rack = site.rack("A02", budget_kw=45, draw_kw=20, feed_amps=(63, 63))
    answer = can_take(rack.pk, 2, HGX, T, using=db.alias)
    assert answer.yes is False and answer.binding is not None
    assert answer.binding.name == "feed N+1" and answer.binding.fits == 1
    assert answer.binding.limit == pytest.approx(36.22, abs=0.01)
    assert answer.binding.margin == pytest.approx(36.22 - 20 - 20, abs=0.01)
    assert answer.constraints[0].fits == 2  # the budget alone would take two


def test_a_rack_bound_by_its_cdu_and_the_other_racks_on_it(db: TierDb) -> None:
    site = Site1(db)
    cdu = site.loop(capacity_kw=60)
    site.rack("A03", budget_kw=45, draw_kw=25, loop=cdu)
    rack = site.rack("A04", budget_kw=45, draw_kw=20, loop=cdu)
    answer = can_take(rack.pk, 2, HGX, T, using=db.alias)
    assert answer.yes is False and answer.binding is not None
    assert answer.binding.name == "CDU heat" and answer.binding.fits == 1  # 60 − 45 = 15 kW
    assert answer.binding.used == pytest.approx(45) and answer.binding.margin == pytest.approx(-5)
    assert can_take(rack.pk, 1, HGX, T, using=db.alias).yes is True


def test_a_rack_bound_by_its_free_rack_units(db: TierDb) -> None:
    site = Site1(db)
    rack = site.rack("A05", budget_kw=200, draw_kw=20, units=(1, 9, 17, 25, 33))
    answer = can_take(rack.pk, 1, HGX, T, using=db.alias)
    assert answer.yes is False and answer.binding is not None
    assert answer.binding.name == "space" and answer.binding.fits == 0
    assert answer.binding.margin == -6  # 2 U free, 8 U asked
    # a 1U server fits in the two units left above U40
    small = can_take(rack.pk, 2, "1U box", T, watts=500, units=1, using=db.alias)
    assert small.yes is True and small.server_w_from == "request"


def test_a_model_without_measured_nodes_is_judged_at_its_rated_power(db: TierDb) -> None:
    site = Site1(db)
    rack = site.rack("A06", budget_kw=45, draw_kw=20)
    answer = can_take(rack.pk, 2, "HGX H100 8-GPU", T, using=db.alias)
    assert (answer.server_w, answer.server_w_from) == (10_200.0, "rated")
    assert answer.yes is True and answer.constraints[0].margin == pytest.approx(4.6)


def test_a_rack_without_measured_draw_gets_no_yes_or_no(db: TierDb) -> None:
    site = Site1(db)
    rack = Rack.objects.using(db.alias).create(hall=site.hall, name="Z01", power_budget_kw=45)
    answer = can_take(rack.pk, 1, HGX, T, using=db.alias)
    assert answer.yes is None and answer.as_json()["answer"] == "unknown"


@pytest.mark.parametrize(
    ("servers", "model", "units", "field"),
    [(0, HGX, None, "servers"), (1, "mystery box", None, "units"), (1, "mystery box", 2, "watts")],
)
def test_questions_that_cannot_be_answered_say_which_input(
    db: TierDb, servers: int, model: str, units: int | None, field: str
) -> None:
    site = Site1(db)
    rack = site.rack("A07", budget_kw=45, draw_kw=20)
    with pytest.raises(CapacityQuestionError) as raised:
        can_take(rack.pk, servers, model, T, units=units, using=db.alias)
    assert raised.value.field == field
