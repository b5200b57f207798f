"""/metrics: Fleetwatch's view (headroom to each GPU's own limit, decoded throttling,
rack power against budget, CDU state, PUE with its category) as Prometheus series,
rendered from the database; closed unless a scrape brings the token or comes from an
allowed address, or it is opened on purpose."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import replace
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings

from agents.protocol import reasons as nvml
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, CoolingLoop, Node, Rack, Site
from tests.support import needs
from tests.support.exposition import series
from tests.support.latest import store

pytestmark = pytest.mark.django_db


@pytest.fixture
def site() -> Site:
    racks = tuple(replace(plan, nodes=1, budget_kw=100) for plan in DEMO_RACKS[:2])
    site = seed_demo_site("demo", racks, gpus_per_node=2)
    GPU.objects.update(slowdown_c=87.0, shutdown_c=92.0)
    CoolingLoop.objects.update(capacity_kw=300, rated_flow_lpm=600, liquid_class="W32")
    return site


TOKEN = "prom-secret-1"


@pytest.fixture(autouse=True)
def metrics_token(settings: Any) -> None:
    """Production's shape: the scrapes below send the token, as a Prometheus would."""
    settings.METRICS_TOKEN = TOKEN


def scrape(token: str | None = TOKEN) -> tuple[int, str]:
    headers = {} if token is None else {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    response = Client().get("/metrics", **headers)  # type: ignore[arg-type]
    return response.status_code, response.content.decode()


def gpu_labels(node: str, gpu: int, **extra: str) -> tuple[tuple[str, str], ...]:
    labels = {"site": "demo", "rack": node.split("-")[1].upper(), "node": node, "gpu": str(gpu)}
    return tuple(sorted({**labels, **extra}.items()))


def test_a_throttled_gpu_reads_as_headroom_and_decoded_reasons(site: Site) -> None:
    now = time.time()
    node = Node.objects.get(rack__name="A01")
    store(
        "gpu",
        (node.id, 0),
        now,
        temp_gpu_c=89.0,
        power_w=350.0,
        power_limit_w=700.0,
        clock_sm_mhz=345.0,
        clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN,
    )
    status, text = scrape()
    assert status == 200
    got = series(text)
    assert got[("fleetwatch_gpu_temperature_celsius", gpu_labels(node.name, 0))] == 89.0
    assert got[("fleetwatch_gpu_slowdown_headroom_celsius", gpu_labels(node.name, 0))] == -2.0
    assert got[("fleetwatch_gpu_power_cap_ratio", gpu_labels(node.name, 0))] == 0.5
    assert got[("fleetwatch_gpu_sm_clock_hertz", gpu_labels(node.name, 0))] == 345e6
    thermal = gpu_labels(node.name, 0, kind="thermal")
    assert got[("fleetwatch_gpu_throttling", thermal)] == 1.0
    reason = gpu_labels(node.name, 0, reason="hw_thermal")
    assert got[("fleetwatch_gpu_clock_event_reason", reason)] == 1.0
    assert got[("fleetwatch_gpu_health_level", gpu_labels(node.name, 0))] == 2.0
    # GPU 1 sent nothing: no figures, marked stale, never a frozen number.
    assert ("fleetwatch_gpu_temperature_celsius", gpu_labels(node.name, 1)) not in got
    assert got[("fleetwatch_gpu_stale", gpu_labels(node.name, 1))] == 1.0


def test_rack_power_against_budget_loop_state_and_pue_category(site: Site) -> None:
    now = time.time()
    rack = Rack.objects.get(name="A01")
    store("rack", (rack.id,), now, power_w=97_000.0)
    loop = CoolingLoop.objects.get(name="CDU-1")
    store("loop", (loop.id,), now, supply_c=30.0, flow_lpm=0.0, pumps_running=0, pumps_failed=3)
    store(
        "facility",
        (site.id,),
        now,
        total_power_w=1_300_000.0,
        it_power_w=1_000_000.0,
        pue_category=2,
    )
    got = series(scrape()[1])
    a01 = (("rack", "A01"), ("site", "demo"))
    assert got[("fleetwatch_rack_power_watts", a01)] == 97_000.0
    assert got[("fleetwatch_rack_power_budget_watts", a01)] == 100_000.0
    assert got[("fleetwatch_rack_power_budget_ratio", a01)] == pytest.approx(0.97)
    cdu = (("loop", "CDU-1"), ("site", "demo"))
    assert got[("fleetwatch_loop_flow_liters_per_minute", cdu)] == 0.0
    assert got[("fleetwatch_loop_pumps_failed", cdu)] == 3.0
    assert got[("fleetwatch_loop_health_level", cdu)] == 2.0
    assert got[("fleetwatch_rack_health_level", a01)] == 2.0  # its loop's state
    assert got[("fleetwatch_site_pue", (("site", "demo"),))] == pytest.approx(1.3)
    categories = [k for k in got if k[0] == "fleetwatch_site_pue_category_info"]
    assert len(categories) == 1


def test_per_gpu_series_can_be_left_out_for_large_fleets(site: Site) -> None:
    node = Node.objects.get(rack__name="A01")
    store("gpu", (node.id, 0), time.time(), temp_gpu_c=60.0)
    with override_settings(METRICS_GPU_SITES="none"):
        got = series(scrape()[1])
    assert not any(name.startswith("fleetwatch_gpu_") for name, _ in got)
    assert ("fleetwatch_rack_power_budget_watts", (("rack", "A01"), ("site", "demo"))) in got


def test_a_configured_token_is_required(site: Site) -> None:
    assert scrape(None)[0] == 401
    assert scrape("wrong")[0] == 403
    status, text = scrape(TOKEN)
    assert status == 200 and "fleetwatch_rack_power_budget_watts" in text


@override_settings(METRICS_TOKEN="")
def test_without_a_token_or_an_allowed_address_metrics_is_refused_saying_how_to_open_it(
    site: Site,
) -> None:
    status, text = scrape(None)
    assert status == 403
    for setting in ("FLEETWATCH_METRICS_TOKEN", "FLEETWATCH_METRICS_ALLOW", "_PUBLIC=1"):
        assert setting in text
    assert "fleetwatch_" not in text


@override_settings(METRICS_ALLOW=(ip_network("10.9.0.0/16"), ip_network("::1")))
def test_an_allowed_address_scrapes_without_the_token(site: Site) -> None:
    def from_address(address: str) -> int:
        return Client(REMOTE_ADDR=address).get("/metrics").status_code

    assert from_address("10.9.4.2") == 200 and from_address("::1") == 200
    assert from_address("10.8.4.2") == 401 and from_address("127.0.0.1") == 401


@override_settings(METRICS_TOKEN="", METRICS_PUBLIC=True)
def test_opened_on_purpose_metrics_answers_anyone(site: Site) -> None:
    status, text = scrape(None)
    assert status == 200 and "fleetwatch_rack_power_budget_watts" in text


def test_the_output_passes_promtool(site: Site, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        needs.missing(needs.PROMETHEUS, "promtool is not installed (Debian package prometheus)")
    node = Node.objects.get(rack__name="A01")
    store("gpu", (node.id, 0), time.time(), temp_gpu_c=60.0, clock_event_reasons=0)
    text = scrape()[1]
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_ingest_counters_are_summed_over_every_writer_that_ran(site: Site) -> None:
    from fleet.models import IngestWriter

    IngestWriter.objects.create(
        writer="a:1:1", started_at=1, updated_at=2, batches=10, samples=80, retried=1, too_old=7
    )
    IngestWriter.objects.create(
        writer="a:2:5", started_at=5, updated_at=6, batches=3, samples=24, too_old=1
    )
    got = series(scrape()[1])
    assert got[("fleetwatch_ingest_batches_total", ())] == 13.0
    assert got[("fleetwatch_ingest_samples_total", ())] == 104.0
    assert got[("fleetwatch_ingest_retried_batches_total", ())] == 1.0
    assert got[("fleetwatch_ingest_too_old_samples_total", ())] == 8.0
    assert got[("fleetwatch_ingest_writer_starts_total", ())] == 2.0


def test_a_gpu_off_the_bus_is_lost_and_critical_while_a_silent_nodes_gpus_are_not(
    site: Site,
) -> None:
    now = time.time()
    reporting = Node.objects.get(rack__name="A01")
    silent = Node.objects.get(rack__name="A02")
    store("gpu", (reporting.id, 0), now, temp_gpu_c=60.0, power_w=300.0)
    store("gpu", (reporting.id, 1), now - 120, temp_gpu_c=95.0, power_w=300.0)  # fell off
    for index in (0, 1):  # the whole node stopped talking: no data, not lost
        store("gpu", (silent.id, index), now - 120, temp_gpu_c=60.0, power_w=300.0)
    got = series(scrape()[1])
    assert got[("fleetwatch_gpu_lost", gpu_labels(reporting.name, 1))] == 1.0
    assert got[("fleetwatch_gpu_health_level", gpu_labels(reporting.name, 1))] == 2.0
    assert ("fleetwatch_gpu_temperature_celsius", gpu_labels(reporting.name, 1)) not in got
    assert got[("fleetwatch_gpu_lost", gpu_labels(reporting.name, 0))] == 0.0
    assert got[("fleetwatch_gpu_lost", gpu_labels(silent.name, 1))] == 0.0
    assert ("fleetwatch_gpu_health_level", gpu_labels(silent.name, 1)) not in got
    rack = (("rack", "A01"), ("site", "demo"))
    assert got[("fleetwatch_rack_gpus_lost", rack)] == 1.0
    assert got[("fleetwatch_rack_health_level", rack)] == 2.0
    assert got[("fleetwatch_rack_gpus_lost", (("rack", "A02"), ("site", "demo")))] == 0.0
    assert got[("fleetwatch_site_gpus_lost", (("site", "demo"),))] == 1.0


def test_incidents_lead_and_alert_instances_follow(site: Site) -> None:
    from django.utils import timezone

    from fleet.alerts.models import AlertGroup, AlertInstance, AlertRule

    now = timezone.now()
    loop = CoolingLoop.objects.get(name="CDU-1")
    group = AlertGroup.objects.create(key=f"loop:{loop.id}", site=site, opened_at=now)
    rule = AlertRule.objects.get(key="gpu-hw-thermal-slowdown")
    for index in range(3):
        AlertInstance.objects.create(
            rule=rule,
            scope="gpu",
            entity=f"9:{index}",
            state="firing",
            site=site,
            group=group,
            started_at=now,
            fired_at=now,
            updated_at=now,
        )
    got = series(scrape()[1])
    assert got[("fleetwatch_incidents", (("severity", "critical"), ("site", "demo")))] == 1.0
    key = (("incident", f"loop:{loop.id}"), ("site", "demo"))
    assert got[("fleetwatch_incident_alerts_firing", key)] == 3.0
    assert got[("fleetwatch_alerts", (("severity", "critical"), ("state", "firing")))] == 3.0
