"""The physical rules the inventory models enforce in clean()."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from fleet.choices import (
    LiquidClassChoices,
    MeterRoleChoices,
    PowerFeedPhaseChoices,
    PowerFeedTypeChoices,
    RackCoolingChoices,
)
from fleet.models import (
    GPU,
    CoolingLoop,
    EnrollmentToken,
    Hall,
    Node,
    PowerFeed,
    Rack,
    Site,
    hash_token,
    pue_category_for_roles,
)


@pytest.fixture
def site(db: None) -> Site:
    return Site.objects.create(slug="ams1", name="Amsterdam 1")


@pytest.fixture
def hall(site: Site) -> Hall:
    return Hall.objects.create(site=site, name="Hall A")


@pytest.fixture
def loop(site: Site) -> CoolingLoop:
    return CoolingLoop.objects.create(site=site, name="CDU-1", capacity_kw=300)


def rack_with_feeds(hall: Hall, budget_kw: float, *feeds: PowerFeed) -> Rack:
    rack = Rack.objects.create(hall=hall, name="A01", power_budget_kw=budget_kw)
    for feed in feeds:
        feed.rack = rack
        feed.save()
    return rack


def errors_of(obj: Rack | GPU | PowerFeed | CoolingLoop) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        obj.full_clean()
    return caught.value.message_dict


# Power feeds ------------------------------------------------------------------------------


def test_single_phase_feed_offers_volts_times_amps_times_utilisation() -> None:
    feed = PowerFeed(phase=PowerFeedPhaseChoices.SINGLE, voltage=230, amperage=32)
    assert feed.available_kw == pytest.approx(230 * 32 * 0.80 / 1000)  # 5.888 kW


def test_three_phase_feed_offers_root_three_times_more() -> None:
    feed = PowerFeed(
        phase=PowerFeedPhaseChoices.THREE, voltage=415, amperage=63, max_utilization=100
    )
    assert feed.available_kw == pytest.approx(415 * 63 * math.sqrt(3) / 1000)  # 45.3 kW


def test_feed_utilisation_outside_one_to_a_hundred_percent_is_refused(hall: Hall) -> None:
    rack = Rack.objects.create(hall=hall, name="A01", power_budget_kw=10)
    for bad in (0, 101):
        assert "max_utilization" in errors_of(PowerFeed(rack=rack, name="A", max_utilization=bad))


def test_only_primary_feeds_count_towards_rack_capacity(hall: Hall) -> None:
    rack = rack_with_feeds(
        hall,
        30,
        PowerFeed(name="A", amperage=63),
        PowerFeed(name="B", amperage=63, type=PowerFeedTypeChoices.REDUNDANT),
    )
    assert rack.feed_capacity_kw() == pytest.approx(415 * 63 * 0.8 * math.sqrt(3) / 1000)


# Rack budget and cooling ------------------------------------------------------------------


def test_rack_budget_above_its_primary_feeds_is_refused_with_both_figures(hall: Hall) -> None:
    rack = rack_with_feeds(
        hall, 200, PowerFeed(name="A", amperage=125), PowerFeed(name="B", amperage=125)
    )
    assert errors_of(rack)["power_budget_kw"] == [
        "budget 200 kW exceeds its primary feeds' 143.8 kW"
    ]


def test_rack_budget_within_its_primary_feeds_is_accepted(hall: Hall) -> None:
    rack = rack_with_feeds(
        hall, 143, PowerFeed(name="A", amperage=125), PowerFeed(name="B", amperage=125)
    )
    rack.full_clean()


def test_redundant_feed_does_not_raise_the_allowed_budget(hall: Hall) -> None:
    rack = rack_with_feeds(
        hall,
        50,
        PowerFeed(name="A", amperage=63),
        PowerFeed(name="B", amperage=63, type=PowerFeedTypeChoices.REDUNDANT),
    )
    assert "power_budget_kw" in errors_of(rack)


@pytest.mark.parametrize(
    "cooling", [RackCoolingChoices.DIRECT_LIQUID, RackCoolingChoices.IMMERSION]
)
def test_liquid_cooled_rack_without_a_loop_is_refused(hall: Hall, cooling: str) -> None:
    rack = Rack(hall=hall, name="A01", power_budget_kw=100, cooling=cooling)
    assert "needs the loop that cools it" in errors_of(rack)["loop"][0]


def test_rear_door_rack_needs_no_loop(hall: Hall) -> None:
    Rack(
        hall=hall, name="A01", power_budget_kw=30, cooling=RackCoolingChoices.REAR_DOOR
    ).full_clean()


def test_air_cooled_rack_on_a_loop_is_refused(hall: Hall, loop: CoolingLoop) -> None:
    rack = Rack(hall=hall, name="A01", power_budget_kw=30, loop=loop)
    assert errors_of(rack)["loop"] == ["an air-cooled rack is not on a liquid loop"]


def test_rack_cooled_by_a_loop_in_another_site_is_refused(hall: Hall) -> None:
    elsewhere = Site.objects.create(slug="fra1", name="Frankfurt 1")
    foreign = CoolingLoop.objects.create(site=elsewhere, name="CDU-1", capacity_kw=300)
    rack = Rack(
        hall=hall,
        name="A01",
        power_budget_kw=100,
        cooling=RackCoolingChoices.DIRECT_LIQUID,
        loop=foreign,
    )
    assert errors_of(rack)["loop"] == ["the loop must be in the rack's site"]


def test_rack_name_is_unique_across_the_halls_of_a_site(site: Site, hall: Hall) -> None:
    Rack.objects.create(hall=hall, name="A01", power_budget_kw=10)
    other_hall = Hall.objects.create(site=site, name="Hall B")
    assert errors_of(Rack(hall=other_hall, name="A01", power_budget_kw=10))["name"] == [
        "rack A01 already exists in ams1"
    ]


def test_non_positive_rack_budget_is_refused(hall: Hall) -> None:
    assert "power_budget_kw" in errors_of(Rack(hall=hall, name="A01", power_budget_kw=0))


# GPUs -------------------------------------------------------------------------------------


def test_gpu_slowdown_above_shutdown_is_refused(hall: Hall) -> None:
    rack = Rack.objects.create(hall=hall, name="A01", power_budget_kw=10)
    node = Node.objects.create(name="gpu-a01-01", rack=rack)
    gpu = GPU(node=node, index=0, slowdown_c=95, shutdown_c=92)
    assert errors_of(gpu)["slowdown_c"] == ["slowdown must not exceed shutdown"]


def test_gpu_slowdown_equal_to_shutdown_is_accepted(hall: Hall) -> None:
    rack = Rack.objects.create(hall=hall, name="A01", power_budget_kw=10)
    node = Node.objects.create(name="gpu-a01-01", rack=rack)
    GPU(node=node, index=0, slowdown_c=92, shutdown_c=92).full_clean()


# Loops, meters, tokens --------------------------------------------------------------------


def test_loop_supply_limit_defaults_to_its_ashrae_class_and_can_be_tightened(
    site: Site,
) -> None:
    loop = CoolingLoop(
        site=site, name="CDU-1", capacity_kw=100, liquid_class=LiquidClassChoices.W32
    )
    assert loop.effective_supply_limit_c() == 32.0
    loop.supply_limit_c = 30
    assert loop.effective_supply_limit_c() == 30


def test_loop_without_positive_capacity_is_refused(site: Site) -> None:
    assert "capacity_kw" in errors_of(CoolingLoop(site=site, name="CDU-1", capacity_kw=0))


@pytest.mark.parametrize(
    ("roles", "category"),
    [
        ({MeterRoleChoices.UTILITY, MeterRoleChoices.IT_INPUT, MeterRoleChoices.UPS_OUTPUT}, 3),
        ({MeterRoleChoices.UTILITY, MeterRoleChoices.PDU_OUTPUT}, 2),
        ({MeterRoleChoices.UTILITY, MeterRoleChoices.UPS_OUTPUT}, 1),
        ({MeterRoleChoices.IT_INPUT}, None),
        ({MeterRoleChoices.UTILITY, MeterRoleChoices.COOLING}, None),
    ],
)
def test_pue_category_is_set_by_the_best_it_metering_point(
    roles: set[str], category: int | None
) -> None:
    assert pue_category_for_roles(roles) == category


def test_issued_enrolment_token_is_stored_only_as_its_hash(site: Site) -> None:
    token, plain = EnrollmentToken.issue(site, label="rollout")
    stored = EnrollmentToken.objects.get(pk=token.pk)
    assert stored.token_hash == hash_token(plain)
    assert plain not in stored.token_hash
    assert stored.usable()


def test_revoked_or_expired_enrolment_token_is_not_usable(site: Site) -> None:
    revoked, _ = EnrollmentToken.issue(site)
    revoked.revoked = True
    expired, _ = EnrollmentToken.issue(site)
    expired.expires = timezone.now() - dt.timedelta(seconds=1)
    assert not revoked.usable()
    assert not expired.usable()
