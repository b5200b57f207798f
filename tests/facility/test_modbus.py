"""Modbus collector reading facility meters held by a pymodbus server on loopback."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agents.facility.config import parse_target
from agents.facility.modbus_collector import ModbusCollector
from agents.facility.modbus_map import decode, encode, load_map, plan_reads
from fleetsim.peers.loop import PeerLoop
from fleetsim.peers.modbus_meter import ModbusMeter
from tests.support.facility import NOW


@pytest.fixture(scope="module")
def peers() -> Iterator[PeerLoop]:
    loop = PeerLoop()
    yield loop
    loop.close()


@pytest.fixture
def start_meter(peers: PeerLoop) -> Iterator[Any]:
    meters: list[ModbusMeter] = []

    def start(map_name: str, **values: float) -> ModbusMeter:
        meter = peers.call(ModbusMeter(map_name).start())
        meter.set(**values)
        meters.append(meter)
        return meter

    yield start
    for meter in meters:
        peers.call(meter.stop())


def meter_collector(address: str, map_name: str, feeds: str = "meter:utility", **extra: Any):
    table = {
        "name": f"meter-{map_name}",
        "protocol": "modbus",
        "address": address,
        "profile": map_name,
        "feeds": feeds,
        "timeout_s": 0.5,
        **extra,
    }
    return ModbusCollector(parse_target(table))


def test_eastron_sdm630_utility_meter_gives_power_and_energy(start_meter):
    meter = start_meter(
        "eastron-sdm630", power_w=412_345.5, energy_kwh=9_876_543.0, current_a=610, voltage_v=231
    )
    collector = meter_collector(meter.address, "eastron-sdm630")

    collector.collect(NOW)

    assert collector.latest is not None
    values = collector.latest.values
    assert values["power_w"] == pytest.approx(412_345.5, rel=1e-6)  # float32 precision
    assert values["energy_kwh"] == pytest.approx(9_876_543.0, rel=1e-6)
    assert collector.status.state == "ok"


def test_schneider_pm5000_kw_and_64bit_wh_are_normalised(start_meter):
    meter = start_meter("schneider-pm5000", power_w=250_000, energy_kwh=123_456.789)
    collector = meter_collector(meter.address, "schneider-pm5000")

    collector.collect(NOW)

    assert collector.latest is not None
    assert collector.latest.values["power_w"] == pytest.approx(250_000, rel=1e-6)
    assert collector.latest.values["energy_kwh"] == pytest.approx(123_456.789)


def test_a_meter_on_a_pdu_output_feeds_a_rack_feed(start_meter):
    meter = start_meter("eastron-sdm630", power_w=40_000, current_a=60, voltage_v=230)
    collector = meter_collector(meter.address, "eastron-sdm630", feeds="feed:A12/B")

    [feed] = collector.collect(NOW).samples["feed"]

    assert (feed["rack"], feed["feed"], feed["power_w"]) == ("A12", "B", 40_000)


def test_modbus_exception_is_reported_with_its_code(start_meter):
    meter = start_meter("eastron-sdm630", power_w=1000)
    meter.exception = 4
    collector = meter_collector(meter.address, "eastron-sdm630")

    assert collector.collect(NOW).samples == {}
    assert collector.status.state == "device_error"
    assert "exception 4 (server device failure)" in collector.status.detail


def test_wrong_register_map_gives_illegal_address(start_meter):
    meter = start_meter("schneider-pm5000", power_w=1000)  # holds registers 2999...
    collector = meter_collector(meter.address, "eastron-sdm630")  # asks for 0..75

    collector.collect(NOW)

    assert collector.status.state == "device_error"
    assert "illegal data address" in collector.status.detail


def test_not_available_nan_is_absent_and_garbage_is_dropped(start_meter):
    meter = start_meter("eastron-sdm630", power_w=1000, voltage_v=230)
    register_map = load_map("eastron-sdm630")
    [energy] = [s for s in register_map.metrics if s.metric == "energy_kwh"]
    [power] = [s for s in register_map.metrics if s.metric == "power_w"]
    meter.set_raw(4, energy.addresses[0], [0x7FC0, 0x0000])  # NaN: "not available"
    meter.set_raw(4, power.addresses[0], encode(-5e12, "float32", True))  # garbage
    collector = meter_collector(meter.address, "eastron-sdm630", feeds="feed:A12/A")

    [feed] = collector.collect(NOW).samples["feed"]

    assert "energy_kwh" not in feed
    assert "power_w" not in feed
    assert feed["voltage_v"] == pytest.approx(230)
    assert "power_w=-5e+12 is implausible" in collector.status.detail


def test_a_silent_meter_times_out(start_meter):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True).start()
    collector = meter_collector(f"127.0.0.1:{silent.getsockname()[1]}", "eastron-sdm630")

    collector.collect(NOW)

    assert collector.status.state == "timeout"
    silent.close()
    for conn in accepted:
        conn.close()


def test_nothing_listening_is_unreachable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    collector = meter_collector(f"127.0.0.1:{port}", "eastron-sdm630")

    collector.collect(NOW)

    assert collector.status.state == "unreachable"


def test_register_words_round_trip_in_both_word_orders():
    for high_first in (True, False):
        words = encode(1234.5, "float32", high_first)
        assert decode(words, "float32", high_first) == 1234.5


def test_sdm630_map_is_read_in_two_requests():
    blocks = plan_reads(load_map("eastron-sdm630"))

    assert [(b.function, b.start, b.count) for b in blocks] == [(4, 0, 54), (4, 72, 2)]


def test_a_meter_that_recovers_is_read_again(start_meter):
    meter = start_meter("eastron-sdm630", power_w=5000)
    collector = meter_collector(meter.address, "eastron-sdm630")
    meter.exception = 6
    collector.collect(NOW)
    failed_state = collector.status.state
    meter.exception = None

    collector.collect(NOW + 10)

    assert failed_state == "device_error"
    assert collector.status.state == "ok"
    assert collector.latest is not None and collector.latest.values["power_w"] == 5000
