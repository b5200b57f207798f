"""A facility agent's targets as configuration: a mixed site, PUE with its category, rack power."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from agents.facility.config import TargetConfigError, parse_target
from agents.facility.poller import FacilityPoller
from agents.facility.targets import build_collectors, check_targets
from agents.protocol.validate import validate_batch
from fleetsim.peers.loop import PeerLoop
from fleetsim.peers.modbus_meter import ModbusMeter
from tests.support.facility import NOW

SECRET = "s3cret-do-not-print"


@pytest.fixture
def utility_meter() -> Iterator[ModbusMeter]:
    loop = PeerLoop()
    meter = loop.call(ModbusMeter("eastron-sdm630").start())
    meter.set(power_w=10_000.0, energy_kwh=5000.0)
    yield meter
    loop.call(meter.stop())
    loop.close()


def site_tables(snmpsim, serve_mockup, utility_meter) -> list[dict[str, Any]]:
    pdu = serve_mockup("pdu", username="admin", password=SECRET)
    cdu = serve_mockup("cooling-unit")
    return [
        {
            "name": "utility",
            "protocol": "modbus",
            "address": utility_meter.address,
            "profile": "eastron-sdm630",
            "feeds": "meter:utility",
        },
        {
            "name": "ups-1",
            "protocol": "snmp",
            "address": snmpsim.address,
            "community": "eaton-93e-80",
            "profile": "ups-mib",
            "feeds": "meter:ups_output",
        },
        {
            "name": "pdu-a12-a",
            "protocol": "snmp",
            "address": snmpsim.address,
            "community": "apc-8641",
            "profile": "apc-rpdu2",
            "feeds": "feed:A12/A",
            "budget_w": 10_000,
        },
        {
            "name": "pdu-a12-b",
            "protocol": "redfish",
            "address": pdu.url,
            "username": "admin",
            "password_env": "PDU_PASSWORD",
            "profile": "pdu",
            "feeds": "feed:A12/B",
        },
        {
            "name": "cdu-1",
            "protocol": "redfish",
            "address": cdu.url,
            "profile": "cdu",
            "feeds": "loop:CDU-1",
        },
        {
            "name": "env-a12",
            "protocol": "snmp",
            "address": snmpsim.address,
            "community": "geist-temperature-sensor",
            "profile": "geist-v4",
            "feeds": "rack:A12",
        },
    ]


def poller_for(tables: list[dict[str, Any]]) -> FacilityPoller:
    [poller] = build_collectors(tables, environ={"PDU_PASSWORD": SECRET})
    assert isinstance(poller, FacilityPoller)
    return poller


def test_site_reports_pue_from_pdu_outputs_as_category_2(snmpsim, serve_mockup, utility_meter):
    poller = poller_for(site_tables(snmpsim, serve_mockup, utility_meter))

    reading = poller.collect(NOW)
    poller.close()

    batch = {"protocol": 1, "source": "site:lon1", "seq": 1, **reading.samples}
    validate_batch(batch, now=NOW)
    [facility] = reading.samples["facility"]
    it_power = 1210.0 + 6438.0  # the APC feed and the Redfish PDU feed
    assert facility["total_power_w"] == 10_000
    assert facility["it_power_w"] == it_power
    assert facility["pue_category"] == 2
    assert facility["pue"] == pytest.approx(10_000 / it_power, abs=1e-3)


def test_rack_power_is_the_sum_of_its_feeds_in_one_rack_row(snmpsim, serve_mockup, utility_meter):
    poller = poller_for(site_tables(snmpsim, serve_mockup, utility_meter))

    reading = poller.collect(NOW)
    lines = check_targets([poller])
    poller.close()

    [rack] = reading.samples["rack"]
    assert rack["power_w"] == 7648.0
    assert "temp_inlet_c" in rack  # the Geist sensor's row, merged with the power sum
    assert {f["feed"] for f in reading.samples["feed"]} == {"A", "B"}
    assert any("rack A12: 7.6 kW" in line and "budget 10.0 kW (76%)" in line for line in lines)


def test_pue_category_follows_the_meters_the_site_has(snmpsim, serve_mockup, utility_meter):
    tables = [
        t for t in site_tables(snmpsim, serve_mockup, utility_meter) if "feed:" not in t["feeds"]
    ]
    poller = poller_for(tables)

    [facility] = poller.collect(NOW).samples["facility"]
    poller.close()

    assert facility["pue_category"] == 1  # only the UPS output is metered
    assert facility["it_power_w"] == 11_400


def test_bmcs_make_it_power_category_3(serve_mockup, utility_meter):
    bmc = serve_mockup("rackmount1")
    tables = [
        {
            "name": "utility",
            "protocol": "modbus",
            "address": utility_meter.address,
            "profile": "eastron-sdm630",
            "feeds": "meter:utility",
        },
        {
            "name": "node-1",
            "protocol": "redfish",
            "address": bmc.url,
            "profile": "bmc",
            "feeds": "meter:it_input",
        },
    ]
    poller = poller_for(tables)

    [facility] = poller.collect(NOW).samples["facility"]
    poller.close()

    assert (facility["pue_category"], facility["it_power_w"]) == (3, 374)


def test_a_dead_target_is_reported_once_and_the_others_keep_reporting(
    snmpsim, serve_mockup, utility_meter
):
    tables = site_tables(snmpsim, serve_mockup, utility_meter)
    tables.append(
        {
            "name": "cdu-gone",
            "protocol": "redfish",
            "address": "http://127.0.0.1:9",
            "profile": "cdu",
            "feeds": "loop:CDU-2",
        }
    )
    poller = poller_for(tables)

    first = poller.collect(NOW)
    second = poller.collect(NOW + 10)
    lines = check_targets([poller])
    poller.close()

    [event] = first.events
    assert event["kind"] == "collector_error" and event["detail"].startswith(
        "facility target cdu-gone: unreachable"
    )
    assert second.events == []  # said once, not every tick
    assert [loop["loop"] for loop in second.samples["loop"]] == ["CDU-1"]
    assert any(line.startswith("UNREACHABLE") and "cdu-gone" in line for line in lines)
    assert any("PUE" in line and "category 2" in line for line in lines)


def test_check_shows_what_each_target_answers_and_never_the_password(
    snmpsim, serve_mockup, utility_meter, caplog
):
    caplog.set_level(logging.DEBUG)
    poller = poller_for(site_tables(snmpsim, serve_mockup, utility_meter))

    lines = check_targets([poller])
    poller.close()

    text = "\n".join(lines)
    assert "OK             pdu-a12-a (snmp" in text and "power_w=1210" in text
    assert "DEGRADED       cdu-1" in text and "Pump '2' has failed." in text
    assert SECRET not in text
    assert SECRET not in caplog.text
    assert SECRET not in repr(poller.targets[3].target)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"password": "x"}, "password_env or password_file"),
        ({"colour": "red"}, "unknown key"),
        ({"feeds": "rack:A12/A"}, "only feed:"),
        ({"feeds": "meter:kitchen"}, "meter role"),
        ({"protocol": "bacnet"}, "protocol must be"),
        ({"address": "https://root:calvin@10.0.0.5"}, "no credentials in `address`"),
        ({"password_env": "NOT_SET_ANYWHERE"}, "NOT_SET_ANYWHERE is not set"),
    ],
)
def test_a_bad_target_table_is_refused_with_a_clear_message(change, message):
    table = {
        "name": "pdu-1",
        "protocol": "redfish",
        "address": "https://10.0.0.5",
        "profile": "pdu",
        "feeds": "feed:A12/A",
        **change,
    }
    with pytest.raises(TargetConfigError, match="pdu-1") as error:
        parse_target(table, environ={})
    assert message in str(error.value)


def test_unknown_profiles_and_duplicate_names_are_refused():
    table = {
        "name": "x",
        "protocol": "snmp",
        "address": "127.0.0.1",
        "profile": "nope",
        "feeds": "feed:A/A",
    }
    with pytest.raises(TargetConfigError, match="no SNMP profile 'nope'"):
        build_collectors([table])
    good = {**table, "profile": "apc-rpdu2"}
    with pytest.raises(TargetConfigError, match="unique"):
        build_collectors([good, good])
