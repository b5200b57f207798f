"""A real Prometheus scrapes Fleetwatch's /metrics (both tiers) with the metrics token, as
docs/prometheus.md configures it, and the series are queryable: what a fleet's existing
Prometheus and Grafana see of Fleetwatch's view."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.protocol import reasons as nvml
from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.prometheus_pull import Prometheus
from tests.support.server import METRICS_TOKEN, FleetServer

NODE = "gpu-a02-04"


@pytest.fixture(scope="module")
def prometheus(
    fleet_server: FleetServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    target = fleet_server.url.removeprefix("http://")
    prom = Prometheus(
        tmp_path_factory.mktemp("prom-fw"), target, job="fleetwatch", bearer=METRICS_TOKEN
    )
    try:
        yield prom
    finally:
        prom.stop()


def test_prometheus_scrapes_fleetwatchs_view_and_can_query_it(
    fleet_server: FleetServer, prometheus: Prometheus
) -> None:
    token = enroll(fleet_server, f"node:{NODE}")
    batch = gpu_batch(NODE, 1, temp_gpu_c=91.0, clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN)
    batch["gpu_info"] = [
        {"gpu": i, "model": "NVIDIA H200", "limits": {"slowdown_c": 89}} for i in range(8)
    ]
    assert post_json(fleet_server.url + "/api/v1/ingest", batch, token)[0] == 200
    racks = fleet_server.query("SELECT count(*) FROM fleet_rack")[0][0]
    prometheus.wait_for("fleetwatch_rack_power_budget_watts", racks)
    prometheus.wait_for(f'fleetwatch_gpu_temperature_celsius{{node="{NODE}"}}', 8)
    [head] = prometheus.query(f'fleetwatch_gpu_slowdown_headroom_celsius{{node="{NODE}",gpu="0"}}')
    assert float(head["value"][1]) == -2.0  # 91 °C against its own 89 °C limit
    assert head["metric"]["job"] == "fleetwatch" and head["metric"]["rack"] == "A02"
    thermal = prometheus.query(
        f'sum(fleetwatch_gpu_clock_event_reason{{node="{NODE}",reason="hw_thermal"}})'
    )
    assert float(thermal[0]["value"][1]) == 8.0
    up = prometheus.query('up{job="fleetwatch"}')
    assert float(up[0]["value"][1]) == 1.0
