"""Pulling dcgm-exporter series from a real Prometheus: it scrapes a local exporter serving
lines built from dcgm-exporter's default counter list, and Fleetwatch pulls them into
storage through the one write path."""

from __future__ import annotations

import datetime as dt
import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.ingest.prometheus.mapping import PULLED_FIELDS
from fleet.ingest.prometheus.pull import pull_all, pull_source
from fleet.ingest.prometheus.pull_db import DjangoDb
from fleet.ingest.prometheus.tasks import pull_prometheus
from fleet.models import (
    GPU,
    Event,
    Hall,
    Node,
    PrometheusSource,
    PulledGPU,
    Rack,
    Site,
    SourceToken,
    UnmatchedSeries,
)
from fleet.storage.latest import rows_to_latest, select_latest_sql
from tests.support.prometheus_pull import (
    Exporter,
    Prometheus,
    closed_port_url,
    default_counters,
    exposition,
)

pytestmark = pytest.mark.django_db

INT64_BLANK = 9223372036854775794
FP64_BLANK = 140737488355328.0
HOT_C = 88  # past the GPU's own slowdown limit (87 °C)


def gpu_labels(gpu: int, uuid: str, host: tuple[str, str] | None, pod: str = "") -> dict[str, str]:
    labels = {"gpu": str(gpu), "UUID": uuid, "pci_bus_id": f"00000000:{gpu + 0x18:02X}:00.0"}
    labels |= {"device": f"nvidia{gpu}", "modelName": "NVIDIA H100 80GB HBM3"}
    if host:
        labels[host[0]] = host[1]
    labels["DCGM_FI_DRIVER_VERSION"] = "580.105.08"
    if pod:
        labels |= {"container": "main", "namespace": "inference", "pod": pod, "pod_uid": ""}
    return labels


# (labels, overrides): every field of the default list for each GPU, some values set apart.
GPUS: list[tuple[dict[str, str], dict[str, float]]] = [
    (
        gpu_labels(0, "GPU-a0101-0", ("Hostname", "gpu-a01-01")),
        {
            "DCGM_FI_DEV_GPU_TEMP": HOT_C,
            "DCGM_FI_DEV_MEMORY_TEMP": INT64_BLANK,
            "DCGM_FI_DEV_XID_ERRORS": 79,
        },
    ),
    (gpu_labels(1, "GPU-a0101-1", ("Hostname", "gpu-a01-01"), pod="vllm-0"), {}),
    (
        gpu_labels(0, "GPU-a0102-0", ("hostname", "gpu-a01-02"), pod="vllm-1"),
        {"DCGM_FI_DEV_POWER_USAGE": FP64_BLANK},
    ),
    # Its UUID is GPU 1 of gpu-a01-02 in the inventory, whatever the host label says.
    (gpu_labels(0, "GPU-a0102-1", ("Hostname", "renamed-host")), {}),
    (gpu_labels(0, "GPU-unknown-0", ("Hostname", "gpu-z99-01")), {}),
]

BASE = {
    "DCGM_FI_DEV_SM_CLOCK": 1980,
    "DCGM_FI_DEV_MEM_CLOCK": 2619,
    "DCGM_FI_DEV_MEMORY_TEMP": 45,
    "DCGM_FI_DEV_GPU_TEMP": 61,
    "DCGM_FI_DEV_POWER_USAGE": 689.5,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789,
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": 2048,
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": 4096,
    "DCGM_FI_DEV_GPU_UTIL": 97,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 40,
    "DCGM_FI_DEV_FB_USED": 70000,
    "DCGM_FI_DEV_FB_FREE": 11000,
    "DCGM_FI_DEV_POWER_VIOLATION": 5000,
    "DCGM_FI_DEV_THERMAL_VIOLATION": 250,
    "DCGM_FI_DEV_XID_ERRORS": 0,
}


def exporter_text(overrides: dict[int, dict[str, float]] | None = None) -> bytes:
    series = []
    for i, (labels, special) in enumerate(GPUS):
        extra = (overrides or {}).get(i, {})
        for name, _kind in default_counters():
            value = extra.get(name, special.get(name, BASE.get(name, 3)))
            series.append((name, labels, value))
    return exposition(series)


FIELDS = len(default_counters())
# The fields Fleetwatch reads (the others of the list have no Fleetwatch metric).
PULLED = len({name for name, _ in default_counters()} & set(PULLED_FIELDS))


@pytest.fixture(scope="module")
def exporter() -> Iterator[Exporter]:
    exp = Exporter()
    exp.body = exporter_text()
    yield exp
    exp.close()


@pytest.fixture(scope="module")
def prometheus(
    exporter: Exporter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    prom = Prometheus(tmp_path_factory.mktemp("prom"), f"127.0.0.1:{exporter.port}")
    try:
        # A pull reads Prometheus as it was a second before: wait until that holds them all.
        prom.wait_for('{__name__=~"DCGM_FI_.*"} offset 1s', FIELDS * len(GPUS))
        yield prom
    finally:
        prom.stop()


@pytest.fixture
def site() -> Site:
    site = Site.objects.create(slug="pull", name="Pull site")
    hall = Hall.objects.create(site=site, name="Hall A")
    rack = Rack.objects.create(hall=hall, name="A01", power_budget_kw=60)
    for n in (1, 2):
        node = Node.objects.create(name=f"gpu-a01-0{n}", rack=rack, position=n)
        for g in (0, 1):
            GPU.objects.create(
                node=node, index=g, uuid=f"GPU-a010{n}-{g}", slowdown_c=87.0, shutdown_c=92.0
            )
    return site


@pytest.fixture
def source(site: Site, prometheus: Prometheus) -> PrometheusSource:
    return PrometheusSource.objects.create(name="dc1", site=site, url=prometheus.url)


def latest(node: str, gpu: int) -> dict[str, Any]:
    rows = rows_to_latest("gpu", DjangoDb().query(select_latest_sql("gpu")))
    node_id = Node.objects.get(name=node).id
    row = rows.get((node_id, gpu))
    return {} if row is None else {**row.values, "_ts": row.ts}


def scrape_time(prometheus: Prometheus, uuid: str) -> float:
    result = prometheus.query(f'timestamp(DCGM_FI_DEV_GPU_TEMP{{UUID="{uuid}"}})')
    return float(result[0]["value"][1])


def test_pulled_figures_are_stored_in_fleetwatch_units_with_their_scrape_time(
    source: PrometheusSource, prometheus: Prometheus
) -> None:
    summary = pull_source(source)
    values = latest("gpu-a01-01", 0)
    assert values["temp_gpu_c"] == HOT_C
    assert values["power_w"] == 689.5
    assert values["energy_j"] == pytest.approx(123456.789)  # mJ → J
    assert values["violation_power_ns"] == 5_000_000  # µs → ns
    assert values["violation_thermal_ns"] == 250_000
    assert values["pcie_tx_kib_s"] == 2048
    assert values["mem_used_mib"] == 70000
    assert values["clock_sm_mhz"] == 1980 and values["util_gpu_pct"] == 97
    # The sample time is when Prometheus scraped it (not when Fleetwatch asked).
    assert values["_ts"]["temp_gpu_c"] <= scrape_time(prometheus, "GPU-a0101-0") + 1e-6
    assert values["_ts"]["temp_gpu_c"] > time.time() - 60
    assert summary["gpus"] == 4 and summary["unmatched"] == 1
    source.refresh_from_db()
    assert source.last_status == "ok" and source.last_error == ""


def test_both_host_label_spellings_and_pod_labelled_gpus_are_matched(
    source: PrometheusSource,
) -> None:
    pull_source(source)
    assert latest("gpu-a01-01", 1)["util_gpu_pct"] == 97  # Hostname, held by a pod
    assert latest("gpu-a01-02", 0)["temp_gpu_c"] == 61  # hostname, held by a pod


def test_a_gpu_is_found_by_its_uuid_under_whatever_host_label_it_carries(
    source: PrometheusSource,
) -> None:
    pull_source(source)
    assert latest("gpu-a01-02", 1)["temp_gpu_c"] == 61  # labelled Hostname="renamed-host"
    assert not UnmatchedSeries.objects.filter(identity__contains="renamed-host").exists()


def test_a_series_of_an_unknown_host_is_listed_with_its_labels(source: PrometheusSource) -> None:
    pull_source(source)
    row = UnmatchedSeries.objects.get(source=source)
    assert "gpu-z99-01" in row.identity and "not a node of this site" in row.reason
    assert row.labels["UUID"] == "GPU-unknown-0" and row.metrics == PULLED
    pull_source(source)
    assert UnmatchedSeries.objects.count() == 1  # the same GPU, seen again: one row


def test_dcgm_blank_sentinels_are_never_stored(source: PrometheusSource) -> None:
    pull_source(source)
    assert "temp_mem_c" not in latest("gpu-a01-01", 0)  # int64 blank
    assert latest("gpu-a01-01", 1)["temp_mem_c"] == 45
    assert "power_w" not in latest("gpu-a01-02", 0)  # fp64 blank
    raw = DjangoDb().query("SELECT max(temp_mem_c), max(power_w) FROM fw_gpu_raw")[0]
    assert raw[0] == 45 and raw[1] == 689.5


def test_the_last_xid_becomes_an_event_only_when_it_changes(
    source: PrometheusSource, exporter: Exporter, prometheus: Prometheus
) -> None:
    pull_source(source)
    pull_source(source)
    events = list(Event.objects.filter(kind="xid").values_list("code", "gpu_index", "source"))
    assert events == [(79, 0, "prometheus:dc1")]
    exporter.body = exporter_text({0: {"DCGM_FI_DEV_XID_ERRORS": 48}})
    try:
        # A pull reads Prometheus as it was a second ago.
        prometheus.wait_for('DCGM_FI_DEV_XID_ERRORS{UUID="GPU-a0101-0"} offset 1s == 48', 1)
        pull_source(source)
    finally:
        exporter.body = exporter_text()
        prometheus.wait_for('DCGM_FI_DEV_XID_ERRORS{UUID="GPU-a0101-0"} == 79', 1)
    codes = Event.objects.filter(kind="xid").values_list("code", flat=True)
    assert sorted(c or 0 for c in codes) == [48, 79]
    gpu = GPU.objects.get(uuid="GPU-a0101-0")
    assert PulledGPU.objects.get(gpu=gpu).last_xid == 48


def test_a_node_whose_agent_reports_keeps_the_agent_figures(source: PrometheusSource) -> None:
    SourceToken.objects.create(
        source="node:gpu-a01-01",
        kind="node",
        site=source.site,
        token_hash="x" * 64,
        last_seen=time.time(),
    )
    summary = pull_source(source)
    assert latest("gpu-a01-01", 0) == {} and latest("gpu-a01-02", 0)["temp_gpu_c"] == 61
    assert summary["agent_wins"] == 2 * PULLED
    pulled = set(PulledGPU.objects.values_list("gpu__node__name", "gpu__index"))
    assert pulled == {("gpu-a01-02", 0), ("gpu-a01-02", 1)}


def test_a_pack_rule_fires_on_a_pulled_temperature_past_the_gpus_slowdown_limit(
    source: PrometheusSource,
) -> None:
    AlertRule.objects.exclude(key="gpu-headroom-critical").update(enabled=False)
    # The pack holds it 30 s before firing; the test does not wait that long.
    AlertRule.objects.filter(key="gpu-headroom-critical").update(for_duration=dt.timedelta(0))
    pull_source(source)
    evaluate(time.time())
    firing = AlertInstance.objects.get(state="firing")
    gpu = GPU.objects.get(uuid="GPU-a0101-0")
    assert firing.rule.key == "gpu-headroom-critical"
    assert firing.entity == f"{gpu.node_id}:0" and firing.value == 87.0 - HOT_C


def test_the_fatal_xid_rule_fires_on_a_pulled_xid(source: PrometheusSource) -> None:
    AlertRule.objects.exclude(key="gpu-xid-fatal").update(enabled=False)
    pull_source(source)
    evaluate(time.time())
    firing = AlertInstance.objects.get(state="firing")
    gpu = GPU.objects.get(uuid="GPU-a0101-0")
    assert firing.rule.key == "gpu-xid-fatal" and firing.entity == f"{gpu.node_id}:0"


def test_a_prometheus_that_is_down_marks_its_source_down_and_the_others_still_pull(
    source: PrometheusSource, site: Site
) -> None:
    PrometheusSource.objects.create(name="gone", site=site, url=closed_port_url())
    results = pull_all()
    gone = PrometheusSource.objects.get(name="gone")
    assert gone.last_status == "down" and "cannot reach" in gone.last_error
    assert "error" in results["gone"] and results["dc1"]["gpus"] == 4
    assert latest("gpu-a01-01", 1)["util_gpu_pct"] == 97


def test_the_celery_task_pulls_every_enabled_source(source: PrometheusSource) -> None:
    result = pull_prometheus()
    assert result["dc1"]["gpus"] == 4


def test_a_backfill_stores_history_at_the_step_asked(
    source: PrometheusSource, prometheus: Prometheus
) -> None:
    # Prometheus holds at least 8 s of this GPU (its scrapes are 1 s apart).
    prometheus.wait_for('count_over_time(DCGM_FI_DEV_GPU_UTIL{UUID="GPU-a0101-1"}[30s]) >= 8', 1)
    pull_source(source)  # a pull first: the backfill still writes the history before it
    node_id = Node.objects.get(name="gpu-a01-01").id
    sql = "SELECT ts FROM fw_gpu_raw WHERE node_id = %s AND gpu = 1 ORDER BY ts"
    before = {ts for (ts,) in DjangoDb().query(sql, (node_id,))}
    call_command("pull_prometheus", "--since", "30s", "--step", "2s")
    added = [ts for (ts,) in DjangoDb().query(sql, (node_id,)) if ts not in before]
    assert len(added) >= 3  # one row per step since Prometheus first scraped the exporter
    assert all(ts % 2 == 0 for ts in added)  # on the step's grid
    assert {b - a for a, b in itertools.pairwise(added)} == {2.0}


def test_a_backfill_too_long_for_its_step_is_refused_before_asking(site: Site) -> None:
    PrometheusSource.objects.create(name="far", site=site, url=closed_port_url())
    with pytest.raises(CommandError, match="use a larger step"):
        call_command("pull_prometheus", "--since", "30d", "--step", "1s")
    assert PrometheusSource.objects.get(name="far").last_status == "never"
