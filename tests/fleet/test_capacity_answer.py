"""Capacity answers (fleet/read/capacity_answer.py): "can rack X take N more servers of
model M?" on both database tiers — a rack bound by its power budget, one by its feeds less
any one (N+1), one by its CDU's heat capacity with another rack on the loop, one by free
rack units; the per-server power measured from the site's nodes of the model (each node's
meter, else its GPUs' sum), else rated, else given; and questions that cannot be answered."""

from __future__ import annotations

import pytest

from fleet.models import Node, Rack
from fleet.read.capacity_answer import CapacityQuestionError, can_take
from fleet.read.rack_room import measured_server_ws
from tests.support import databases
from tests.support.capacity_rows import ANSWER_HOURS, HGX, HOUR, gpu_hours, node_hours
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


def p95(values: list[float]) -> float:
    """PostgreSQL's percentile_cont(0.95): linear between the two nearest ranks."""
    ordered = sorted(values)
    pos = 0.95 * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def test_per_server_power_is_each_nodes_meter_else_its_gpus_sum(db: TierDb) -> None:
    site = Site1(db)
    rack = site.rack("X01", budget_kw=45, draw_kw=20)
    hours = [T - (k + 1) * HOUR for k in range(ANSWER_HOURS)]
    # x1: no meter, two GPUs; x2: a meter for its first 24 hours only, GPUs throughout
    x1 = Node.objects.using(db.alias).create(name="x1", rack=rack, position=1, model="X box")
    x2 = Node.objects.using(db.alias).create(name="x2", rack=rack, position=2, model="X box")
    node_hours(db, x2, [(b, 1000.0 + 10 * k) for k, b in enumerate(hours[:24])])
    for gpu, watts in ((0, 300.0), (1, 400.0)):
        gpu_hours(db, x1, gpu, [(b, watts + k, 50.0) for k, b in enumerate(hours)])
        gpu_hours(db, x2, gpu, [(b, watts / 2, 50.0) for b in hours])
    # the measured HGX node's GPUs: never read, its meter reported every hour
    m01 = Node.objects.using(db.alias).get(name="m01-n1")
    gpu_hours(db, m01, 0, [(b, 1.0, 50.0) for b in hours])
    drawn = [700.0 + 2 * k for k in range(ANSWER_HOURS)]  # x1: its GPUs' sum
    drawn += [1000.0 + 10 * k for k in range(24)] + [350.0] * 24  # x2: meter, else GPUs
    measured = measured_server_ws(site.site.pk, T, using=db.alias)
    assert measured == {HGX: pytest.approx(10e3), "X box": pytest.approx(p95(drawn))}
    answer = can_take(rack.pk, 1, "X box", T, units=1, using=db.alias)
    assert answer.server_w == pytest.approx(p95(drawn)) and answer.server_w_from == "measured"
