"""A site's strip figures: facility, IT and cooling power with where cooling came from,
PUE with its category in words, alerts firing (per rack and loop, worst severity) and
node agents gone quiet or never heard from."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from django.utils import timezone

from fleet.alerts.models import AlertGroup, AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.health import STALE_AFTER_S
from fleet.models import CoolingLoop, Node, Rack, Site
from fleet.read.site_summary import site_payload, site_payloads
from tests.support.alert_engine import fire
from tests.support.latest import store

pytestmark = pytest.mark.django_db


@pytest.fixture
def site() -> Site:
    racks = tuple(replace(plan, nodes=2) for plan in DEMO_RACKS[:2])  # A01, A02 on CDU-1
    return seed_demo_site("demo", racks, gpus_per_node=2)


def test_facility_figures_carry_pue_with_its_category_and_derived_cooling(site: Site) -> None:
    now = time.time()
    store("facility", (site.pk,), now, total_power_w=1.3e6, it_power_w=1.0e6, pue_category=2)
    strip = site_payload(site.pk, now)
    assert strip["total_power_w"] == 1.3e6 and strip["it_power_w"] == 1.0e6
    assert strip["pue"] == pytest.approx(1.3)
    assert (strip["pue_category"], strip["pue_category_words"]) == (2, "PDU output")
    assert strip["cooling_power_w"] == pytest.approx(0.3e6)
    assert strip["cooling_source"] == "derived"  # no cooling meter: facility − IT


def test_a_cooling_meter_is_used_when_the_site_has_one(site: Site) -> None:
    now = time.time()
    store(
        "facility",
        (site.pk,),
        now,
        total_power_w=1.3e6,
        it_power_w=1.0e6,
        cooling_power_w=0.22e6,
        pue_category=1,
    )
    strip = site_payload(site.pk, now)
    assert (strip["cooling_power_w"], strip["cooling_source"]) == (0.22e6, "meter")


def test_a_site_without_facility_data_reads_as_no_data_not_a_crash(site: Site) -> None:
    strip = site_payload(site.pk, time.time())
    assert strip["pue"] is None and strip["total_power_w"] is None
    assert strip["cooling_power_w"] is None and strip["cooling_source"] is None
    assert strip["alerts"]["firing"] == 0


def test_alerts_firing_are_counted_per_site_rack_and_loop_with_the_worst_severity(
    site: Site,
) -> None:
    a01, a02 = Rack.objects.get(name="A01"), Rack.objects.get(name="A02")
    loop = CoolingLoop.objects.get(name="CDU-1")
    fire("warning", rack=a01)
    fire("critical", rack=a01)
    fire("warning", loop=loop)
    strip = site_payload(site.pk, time.time())["alerts"]
    assert (strip["firing"], strip["critical"]) == (3, 1)
    assert strip["racks"][str(a01.pk)] == {"n": 2, "severity": "critical", "level": "crit"}
    assert str(a02.pk) not in strip["racks"]
    assert strip["loops"][str(loop.pk)] == {"n": 1, "severity": "warning", "level": "warn"}
    assert strip["level"] == "crit"  # the worst firing alert's level (fleet/health/severity.py)


def test_an_info_alert_firing_leaves_the_strip_and_the_tile_ok(site: Site) -> None:
    """One level for it everywhere: it used to read "warn" on the strip, "ok" on the tile."""
    a01 = Rack.objects.get(name="A01")
    rule = AlertRule.objects.filter(severity="warning").first()
    assert rule is not None
    rule.pk, rule.key, rule.severity = None, "an-info-rule", "info"  # the pack has none
    rule.save()
    fire("info", rack=a01)
    strip = site_payload(site.pk, time.time())["alerts"]
    assert strip["firing"] == 1
    assert strip["level"] == strip["racks"][str(a01.pk)]["level"] == "ok"


def test_resolved_alerts_are_not_counted(site: Site) -> None:
    fire("critical", rack=Rack.objects.get(name="A01"))
    AlertInstance.objects.update(state="resolved")
    assert site_payload(site.pk, time.time())["alerts"]["firing"] == 0


def test_agents_are_stale_when_their_newest_data_is_older_than_the_freshness_target(
    site: Site,
) -> None:
    now = time.time()
    nodes = list(Node.objects.order_by("name"))
    assert len(nodes) == 4
    store("node", (nodes[0].pk,), now, cpu_pct=10.0)  # fresh node sample
    store("gpu", (nodes[1].pk, 0), now, temp_gpu_c=60.0)  # fresh GPU sample only
    store("node", (nodes[2].pk,), now - STALE_AFTER_S - 5, cpu_pct=10.0)  # quiet
    agents = site_payload(site.pk, now)["agents"]  # nodes[3] never sent anything
    assert agents == {
        "nodes": 4,
        "stale": 1,
        "never": 1,
        "level": "warn",
        "words": "1 of 4 nodes · 1 never sent data",
    }


def test_many_sites_are_built_at_once_each_with_its_own_figures(site: Site) -> None:
    other = seed_demo_site("other", (replace(DEMO_RACKS[0], name="Z01", nodes=1),), gpus_per_node=1)
    now = time.time()
    store("facility", (other.pk,), now, total_power_w=2e5, it_power_w=1.6e5, pue_category=3)
    both = site_payloads([site.pk, other.pk], now)
    assert both[site.pk]["pue"] is None
    assert both[other.pk]["pue"] == pytest.approx(1.25)
    assert both[other.pk]["agents"]["nodes"] == 1 and both[site.pk]["agents"]["nodes"] == 4


def test_a_facility_push_to_the_site_group_carries_the_refreshed_counts(site: Site) -> None:
    from fleet.read.live import site_group
    from fleet.read.payloads import UpdatePlan, build_updates

    now = time.time()
    store("facility", (site.pk,), now, total_power_w=1.3e6, it_power_w=1.0e6, pue_category=2)
    fire("critical", rack=Rack.objects.get(name="A01"))
    [(group, message)] = build_updates(UpdatePlan({}, {site.pk}), {site_group(site.pk)}, now)
    assert group == site_group(site.pk)
    pushed = message["site"]
    assert pushed["site_id"] == site.pk  # the page knows whose strip it is
    assert pushed["alerts"]["firing"] == 1 and pushed["agents"]["never"] == 4


def test_the_strip_leads_with_open_incidents_worst_first_and_counts_alerts_second(
    site: Site,
) -> None:
    now = timezone.now()
    loop = CoolingLoop.objects.get(name="CDU-1")
    a02 = Rack.objects.get(name="A02")
    cdu = AlertGroup.objects.create(
        key=f"loop:{loop.pk}", site=site, opened_at=now, title="CDU-1: no pump running"
    )
    power = AlertGroup.objects.create(
        key=f"rack:{a02.pk}:rack-power-90", site=site, opened_at=now, title="A02 power"
    )
    over = AlertGroup.objects.create(key="rack:0:old", site=site, opened_at=now, closed_at=now)
    fire("warning", rack=a02, group=power)
    for _ in range(3):
        fire("critical", loop=loop, group=cdu)
    fire("critical", rack=a02, group=over)  # a closed incident is not open
    fire("warning", rack=a02)  # firing, in no incident
    alerts = site_payload(site.pk, time.time())["alerts"]
    assert alerts["incident_count"] == 2 and alerts["incident_level"] == "crit"
    assert alerts["incident_words"] == (
        "2 incidents: CDU-1: no pump running (3 alerts); A02 power (1 alert)"
    )
    assert [i["severity"] for i in alerts["incidents"]] == ["critical", "warning"]
    assert alerts["firing"] == 6  # instances: secondary, still counted
    AlertGroup.objects.filter(pk=power.pk).update(closed_at=now)
    alerts = site_payload(site.pk, time.time())["alerts"]
    assert alerts["incident_words"] == "1 incident: CDU-1: no pump running (3 alerts)"


def test_a_site_with_nothing_open_says_so(site: Site) -> None:
    alerts = site_payload(site.pk, time.time())["alerts"]
    assert alerts["incident_words"] == "no incident open" and alerts["incident_level"] == "ok"
