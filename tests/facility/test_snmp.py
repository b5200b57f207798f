"""SNMP collector reading real device walks served by snmpsim on loopback, through pysnmp."""

from __future__ import annotations

from typing import Any

import pytest

from agents.facility.config import parse_target
from agents.facility.snmp_collector import SnmpCollector
from agents.protocol.validate import validate_batch
from tests.support.facility import NOW, V3_USER, free_udp_port

SECRETS = {"SNMP_AUTH": V3_USER["auth_key"], "SNMP_PRIV": V3_USER["priv_key"], "BAD": "not-the-key"}


def snmp_target(address: str, walk: str, profile: str, feeds: str, **extra: Any) -> SnmpCollector:
    table = {
        "name": walk,
        "protocol": "snmp",
        "address": address,
        "profile": profile,
        "feeds": feeds,
        "community": walk,  # snmpsim picks the walk by community name
        "timeout_s": 0.5,
        **extra,
    }
    return SnmpCollector(parse_target(table, environ=SECRETS))


def validated(kind: str, reading: Any) -> dict[str, Any]:
    batch = {"protocol": 1, "source": "site:lon1", "seq": 1, kind: reading.samples[kind]}
    validate_batch(batch, now=NOW)
    [sample] = reading.samples[kind]
    return dict(sample)


def test_apc_metered_pdu_reports_feed_power_energy_current_and_voltage(snmpsim):
    collector = snmp_target(snmpsim.address, "apc-8641", "apc-rpdu2", "feed:A12/A")

    feed = validated("feed", collector.collect(NOW))

    assert feed == {
        "ts": NOW,
        "rack": "A12",
        "feed": "A",
        "power_w": 1210.0,  # 121 hundredths of a kW
        "energy_kwh": 1951.6,
        "current_a": 6.5,
        "voltage_v": 201.0,
    }
    assert collector.status.state == "ok"


def test_apc_switched_pdu_without_metering_leaves_power_absent_not_zero(snmpsim):
    collector = snmp_target(snmpsim.address, "apc-7902b", "apc-rpdu2", "feed:A12/B")

    feed = validated("feed", collector.collect(NOW))

    assert "power_w" not in feed and "energy_kwh" not in feed and "voltage_v" not in feed
    assert feed["current_a"] == 1.6


def test_liebert_cooling_unit_reports_return_air_and_humidity(snmpsim):
    collector = snmp_target(snmpsim.address, "vertiv-power", "liebert-gp-environmental", "rack:A12")

    rack = validated("rack", collector.collect(NOW))

    assert rack["temp_outlet_c"] == 23  # return air, found by its sensor identity OID
    assert rack["humidity_pct"] == 42
    assert "temp_inlet_c" not in rack  # supply-air row has no measurement in the walk


def test_geist_environment_sensor_reports_rack_air(snmpsim):
    collector = snmp_target(snmpsim.address, "geist-temperature-sensor", "geist-v4", "rack:A12")

    rack = validated("rack", collector.collect(NOW))

    # snmpsim's numeric variation moves both from the recorded 15.4 °C and 39 %; past `max`
    # its wrap adds `min` to the remainder, so a value lies in [min, min + max): 100–399
    # tenths of a degree, 25–74 % (73 % was seen)
    assert 10 <= rack["temp_inlet_c"] < 40
    assert 25 <= rack["humidity_pct"] < 75


def test_ups_mib_output_power_is_the_sum_of_its_lines(snmpsim):
    collector = snmp_target(snmpsim.address, "eaton-93e-80", "ups-mib", "meter:ups_output")

    assert collector.collect(NOW).samples == {}
    assert collector.latest is not None
    assert collector.latest.values == {"power_w": 5100 + 3600 + 2700}
    assert collector.status.state == "ok"


def v3_target(snmpsim, device, profile, target, auth_key_env="SNMP_AUTH"):
    """An SNMPv3 target (authentication and privacy) on the simulated device's own context."""
    return snmp_target(
        snmpsim.address,
        device,
        profile,
        target,
        version="3",
        username=V3_USER["username"],
        auth_key_env=auth_key_env,
        priv_key_env="SNMP_PRIV",
        context=device,
        # snmpsim does SNMPv3's discovery, hashing and ciphers in Python: on a loaded CI
        # machine its first answer took longer than the 0.5 s the v2c tests allow (seen once)
        timeout_s=3.0,
    )


def test_snmp_v3_with_authentication_and_privacy_reads_the_pdu(snmpsim):
    collector = v3_target(snmpsim, "apc-8641", "apc-rpdu2", "feed:A12/A")

    assert validated("feed", collector.collect(NOW))["power_w"] == 1210.0


def test_snmp_v3_with_a_wrong_key_is_auth_failed(snmpsim):
    collector = v3_target(snmpsim, "apc-8641", "apc-rpdu2", "feed:A12/A", auth_key_env="BAD")

    assert collector.collect(NOW).samples == {}
    assert collector.status.state == "auth_failed"


def test_wrong_community_times_out_with_a_hint(snmpsim):
    collector = snmp_target(snmpsim.address, "no-such-walk", "apc-rpdu2", "feed:A12/A")

    collector.collect(NOW)

    assert collector.status.state == "timeout"
    assert "community" in collector.status.detail


def test_agent_error_status_is_a_device_error_and_other_targets_keep_reporting(snmpsim):
    broken = snmp_target(snmpsim.address, "fault-apc-generr", "apc-rpdu2", "feed:A12/A")
    healthy = snmp_target(snmpsim.address, "apc-8641", "apc-rpdu2", "feed:A13/A")

    assert broken.collect(NOW).samples == {}
    assert healthy.collect(NOW).samples["feed"][0]["power_w"] == 1210.0
    assert broken.status.state == "device_error"
    assert "genErr" in broken.status.detail


def test_garbage_and_out_of_range_values_are_dropped_and_said(snmpsim):
    collector = snmp_target(snmpsim.address, "fault-apc-garbage", "apc-rpdu2", "feed:A12/A")

    feed = validated("feed", collector.collect(NOW))

    assert "power_w" not in feed  # the agent answered "n/a"
    assert "current_a" not in feed  # 200 kA is not a rack feed
    assert feed["voltage_v"] == 230
    assert collector.status.state == "degraded"
    assert "'n/a'" in collector.status.detail
    assert "current_a=200000 is implausible" in collector.status.detail
    assert "PDU load: overload" in collector.status.detail


def test_nothing_listening_is_unreachable():
    address = f"127.0.0.1:{free_udp_port()}"
    collector = snmp_target(address, "apc-8641", "apc-rpdu2", "feed:A12/A")

    collector.collect(NOW)

    assert collector.status.state == "unreachable"


def test_a_profile_cannot_feed_the_wrong_kind_of_entity():
    with pytest.raises(ValueError, match="feeds"):
        snmp_target("127.0.0.1:161", "x", "ups-mib", "loop:CDU-1")


def test_snmp_v3_finds_table_rows_by_their_identity_too(snmpsim):
    collector = v3_target(snmpsim, "vertiv-power", "liebert-gp-environmental", "rack:A12")

    rack = validated("rack", collector.collect(NOW))

    assert (rack["temp_outlet_c"], rack["humidity_pct"]) == (23, 42)
