"""Redfish collectors against DMTF mockups and real-BMC captures served over HTTP on loopback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agents.facility.config import parse_target
from agents.facility.redfish import read_node_power, sensor_value
from agents.facility.redfish_client import RedfishClient
from agents.facility.redfish_collector import RedfishCollector
from agents.protocol.validate import validate_batch
from fleetsim.peers.redfish_server import RedfishServer, RedfishTree
from tests.support.facility import MOCKUPS, NOW


def collector_for(
    server: RedfishServer, profile: str, feeds: str, **extra: Any
) -> RedfishCollector:
    table = {
        "name": f"test-{profile}",
        "protocol": "redfish",
        "address": server.url,
        "profile": profile,
        "feeds": feeds,
        **extra,
    }
    return RedfishCollector(parse_target(table, environ={"RF_PASSWORD": "secret"}))


def as_batch(kind: str, samples: list[dict[str, Any]]) -> dict[str, Any]:
    batch = {"protocol": 1, "source": "site:lon1", "seq": 1, "sent_at": NOW, kind: samples}
    validate_batch(batch, now=NOW)
    return batch


def test_cdu_with_failed_pump_reports_pump_failure(serve_mockup):
    server = serve_mockup("cooling-unit")
    collector = collector_for(server, "cdu", "loop:CDU-1")

    reading = collector.collect(NOW)

    [loop] = as_batch("loop", reading.samples["loop"])["loop"]
    assert loop["pumps_failed"] == 1
    assert loop["pumps_running"] == 1
    assert collector.status.state == "degraded"
    assert "Pump '2' has failed." in collector.status.detail


def test_cdu_reports_secondary_and_primary_loop_readings(serve_mockup):
    collector = collector_for(serve_mockup("cooling-unit"), "cdu", "loop:CDU-1")

    [loop] = collector.collect(NOW).samples["loop"]

    assert loop["loop"] == "CDU-1"
    assert (loop["supply_c"], loop["return_c"], loop["delta_c"]) == (30, 48, 18)
    assert (loop["flow_lpm"], loop["dp_kpa"], loop["heat_removed_kw"]) == (42, 34, 25.31)
    assert loop["leak"] == 0
    assert "primary_supply_c" in loop


def test_rack_pdu_reports_feed_power_energy_and_worst_phase(serve_mockup):
    collector = collector_for(serve_mockup("pdu"), "pdu", "feed:A12/A")

    [feed] = as_batch("feed", collector.collect(NOW).samples["feed"])["feed"]

    assert (feed["rack"], feed["feed"]) == ("A12", "A")
    assert feed["power_w"] == 6438
    assert feed["energy_kwh"] == 56438
    assert feed["current_a"] == 8.66  # the most loaded line of the mains
    assert collector.status.state == "ok"


def test_power_shelf_reads_as_a_feed(serve_mockup):
    server = serve_mockup("power-shelf")
    collector = collector_for(server, "pdu", "feed:A12/B", device="PowerShelves/1")

    [feed] = collector.collect(NOW).samples["feed"]

    assert feed["power_w"] > 0


def test_sensor_link_that_answers_404_is_no_reading_not_a_failure(serve_mockup, tmp_path: Path):
    # The DMTF PDU's energy links to a Sensor the mockup does not contain; without the
    # inline Reading the collector must follow the link, get 404, and carry on.
    tree = tmp_path / "pdu"
    shutil.copytree(MOCKUPS["pdu"], tree)
    metrics = tree / "PowerEquipment/RackPDUs/1/Metrics/index.json"
    body = json.loads(metrics.read_text())
    del body["EnergykWh"]["Reading"]
    metrics.write_text(json.dumps(body))
    server = RedfishServer(RedfishTree.from_mockup(tree)).start()
    try:
        collector = collector_for(server, "pdu", "feed:A12/A")
        [feed] = collector.collect(NOW).samples["feed"]
    finally:
        server.stop()

    assert "energy_kwh" not in feed
    assert feed["power_w"] == 6438
    assert collector.status.state == "ok"


def test_rackmount_server_answers_on_the_modern_paths(serve_mockup):
    client = RedfishClient(serve_mockup("rackmount1").url)

    node = read_node_power(client)

    assert node == {
        "power_w": 374,
        "temp_inlet_c": 24.8,
        "temp_outlet_c": 40.5,
        "power_path": "EnvironmentMetrics",
        "thermal_path": "ThermalSubsystem",
    }


def test_real_hpe_8x_a100_server_answers_on_the_legacy_paths(serve_mockup):
    client = RedfishClient(serve_mockup("xl675d").url)

    node = read_node_power(client)

    # 894 W is the chassis total; the PSUs each repeat it and must not be summed.
    assert node["power_w"] == 894
    assert node["temp_inlet_c"] == 15  # "01-Inlet Ambient"
    assert (node["power_path"], node["thermal_path"]) == ("Power", "Thermal")


def test_real_gigabyte_bmc_power_sensor_without_units_is_read(serve_mockup):
    client = RedfishClient(serve_mockup("gigabyte").url)

    node = read_node_power(client)

    assert node["power_w"] == 196
    assert node["power_path"] == "Sensors"
    # Gigabyte labels every temperature "Intake", CPUs included: no inlet is guessed.
    assert "temp_inlet_c" not in node


def test_bmc_target_feeds_it_input_meter(serve_mockup):
    collector = collector_for(serve_mockup("rackmount1"), "bmc", "meter:it_input")

    reading = collector.collect(NOW)

    assert reading.samples == {}  # meters feed the site's PUE, not samples of their own
    assert collector.latest is not None and collector.latest.values == {"power_w": 374}
    assert collector.status.answered_by == "redfish:EnvironmentMetrics+ThermalSubsystem"


def test_bad_credentials_give_auth_failed_for_that_target(serve_mockup):
    server = serve_mockup("pdu", username="admin", password="right")
    collector = collector_for(
        server, "pdu", "feed:A12/A", username="admin", password_env="RF_PASSWORD"
    )

    reading = collector.collect(NOW)

    assert reading.samples == {}
    assert collector.status.state == "auth_failed"


@pytest.mark.parametrize("auth", ["basic", "session"])
def test_good_credentials_are_accepted_with_basic_and_session_auth(serve_mockup, auth):
    server = serve_mockup("pdu", username="admin", password="secret")
    collector = collector_for(
        server, "pdu", "feed:A12/A", username="admin", password_env="RF_PASSWORD", auth=auth
    )

    assert collector.collect(NOW).samples["feed"][0]["power_w"] == 6438
    collector.close()
    if auth == "session":
        assert server.sessions == set()  # logged out on close


def test_a_stalled_bmc_times_out_and_reports_timeout(serve_mockup):
    server = serve_mockup("cooling-unit", delay_s=5.0)
    collector = collector_for(server, "cdu", "loop:CDU-1", timeout_s=0.3)

    assert collector.collect(NOW).samples == {}
    assert collector.status.state == "timeout"


def test_nothing_listening_is_unreachable():
    table = {
        "name": "gone",
        "protocol": "redfish",
        "address": "http://127.0.0.1:9",
        "profile": "cdu",
        "feeds": "loop:CDU-9",
    }
    collector = RedfishCollector(parse_target(table))

    collector.collect(NOW)

    assert collector.status.state == "unreachable"


def test_garbage_body_is_bad_data(serve_mockup):
    server = serve_mockup("cooling-unit")
    server.raw_bodies["/redfish/v1/ThermalEquipment/CDUs"] = b"<html>login</html>"
    collector = collector_for(server, "cdu", "loop:CDU-1")

    collector.collect(NOW)

    assert collector.status.state == "bad_data"


def test_out_of_range_reading_is_dropped_and_said(serve_mockup):
    server = serve_mockup("cooling-unit")
    path = "/redfish/v1/ThermalEquipment/CDUs/1/SecondaryCoolantConnectors/1"
    server.tree.update(path, {"SupplyTemperatureCelsius": {"Reading": 900}})
    collector = collector_for(server, "cdu", "loop:CDU-1")

    [loop] = as_batch("loop", collector.collect(NOW).samples["loop"])["loop"]

    assert "supply_c" not in loop
    assert "supply_c=900 is implausible" in collector.status.detail


@pytest.mark.parametrize(
    ("sensor", "unit", "expected"),
    [
        ({"Reading": 6.438, "ReadingUnits": "kW"}, "W", 6438.0),
        ({"Reading": 374, "ReadingUnits": "W"}, "W", 374.0),
        ({"Reading": 196}, "W", 196.0),  # Gigabyte: no ReadingUnits, the schema's unit
        ({"Reading": 31, "ReadingUnits": "Cel"}, "C", 31.0),
        ({"Reading": 31, "ReadingUnits": "C"}, "C", 31.0),  # DMTF's own PDU CabTemp
        ({"Reading": 87.8, "ReadingUnits": "[degF]"}, "C", 31.0),
        ({"Reading": 468, "ReadingUnits": "J"}, "kWh", 468 / 3.6e6),
        ({"Reading": 1.2, "ReadingUnits": "bar"}, "kPa", 120.0),
        ({"Reading": 30, "ReadingUnits": "%"}, "C", None),  # not a temperature: no reading
        ({"Reading": "n/a", "ReadingUnits": "W"}, "W", None),
        ({"Reading": None, "ReadingUnits": "W"}, "W", None),
    ],
)
def test_sensor_unit_spellings_are_normalised(sensor, unit, expected):
    value = sensor_value(sensor, unit)

    assert value == (pytest.approx(expected) if expected is not None else None)


def test_an_expired_session_is_renewed_without_a_failure(serve_mockup):
    server = serve_mockup("pdu", username="admin", password="secret")
    collector = collector_for(
        server, "pdu", "feed:A12/A", username="admin", password_env="RF_PASSWORD", auth="session"
    )
    collector.collect(NOW)
    server.sessions.clear()  # the BMC forgot the session (reboot, idle timeout)

    [feed] = collector.collect(NOW + 10).samples["feed"]

    assert feed["power_w"] == 6438
    assert collector.status.state == "ok"


def test_links_outside_the_service_are_not_followed(serve_mockup):
    server = serve_mockup("pdu")
    client = RedfishClient(server.url)

    assert client.get("http://198.51.100.7/redfish/v1/Chassis") is None
    assert client.get("/etc/passwd") is None
    assert client.requests == 0  # neither was requested
    assert client.get(f"{server.url}/redfish/v1/PowerEquipment/RackPDUs/1/") is not None
