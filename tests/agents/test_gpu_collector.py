from __future__ import annotations

import time
from typing import Any

import pynvml

from agents.collectors.base import Reading
from agents.outbox import build_batch
from agents.protocol import reasons
from agents.protocol.validate import validate_batch
from fleetsim.nvml_answers import MigInstance
from tests.support.nvml_scenarios import IDLE_T, LOAD_T, TraceClock, collector, fake_gpus


def _by_gpu(reading: Reading) -> dict[int, dict[str, Any]]:
    return {s["gpu"]: s for s in reading.samples.get("gpu", [])}


def _valid(reading: Reading) -> None:
    validate_batch(build_batch("node:gpu-a01-01", 1, reading, {}), time.time() + 10)


def test_idle_h200_reads_as_captured() -> None:
    gpu = collector(fake_gpus(1))
    sample = _by_gpu(gpu.collect(time.time()))[0]
    assert 78 <= sample["power_w"] <= 85
    assert sample["temp_gpu_c"] == 37 or sample["temp_gpu_c"] == 38
    assert sample["temp_mem_c"] == 40
    assert sample["clock_event_reasons"] == reasons.GPU_IDLE
    assert sample["power_limit_w"] == 700.0
    assert sample["temp_margin_c"] == 87 - sample["temp_gpu_c"]
    assert "power_instant_w" in sample and "ecc_dbe_vol_total" in sample


def test_fields_the_h200_does_not_support_are_left_out_not_zero() -> None:
    gpu = collector(fake_gpus(1))
    reading = gpu.collect(time.time())
    sample = _by_gpu(reading)[0]
    assert "fan_pct" not in sample  # NotSupported on the SXM board
    for read in gpu.slow_reads():
        reading.merge(read.read(time.time()))
    assert not any(k.startswith("nvlink") for s in reading.samples["gpu"] for k in s)
    _valid(reading)


def test_load_shows_the_power_cap_reason_from_the_trace() -> None:
    gpu = collector(fake_gpus(1, TraceClock(LOAD_T)))
    sample = _by_gpu(gpu.collect(time.time()))[0]
    assert 680 <= sample["power_w"] <= 700
    assert reasons.decode(int(sample["clock_event_reasons"])) == ["power_cap"]
    assert 1400 <= sample["clock_sm_mhz"] <= 1530


def test_every_reason_in_the_trace_decodes_to_a_name() -> None:
    clock = TraceClock()
    gpu = collector(fake_gpus(1, clock))
    seen: set[str] = set()
    for step in range(0, 400, 4):
        clock.t = step * 0.25
        seen.update(
            reasons.decode(int(_by_gpu(gpu.collect(time.time()))[0]["clock_event_reasons"]))
        )
    assert seen == {"gpu_idle", "power_cap"}


def test_limits_are_sent_once_in_both_absolute_and_tlimit_forms() -> None:
    gpu = collector(fake_gpus(2))
    first = gpu.collect(time.time())
    limits = first.gpu_info[0]["limits"]
    assert (limits["slowdown_c"], limits["shutdown_c"]) == (89, 95)
    assert (limits["gpu_max_c"], limits["mem_max_c"]) == (87, 95)
    assert (limits["power_limit_min_w"], limits["power_limit_max_w"]) == (200.0, 700.0)
    assert (limits["tlimit_slowdown_c"], limits["tlimit_shutdown_c"]) == (-2, -8)
    assert first.gpu_info[0]["model"] == "NVIDIA H200"
    assert first.gpu_info[0]["uuid"] != first.gpu_info[1]["uuid"]
    assert gpu.collect(time.time()).gpu_info == []
    _valid(first)


def test_gpu_without_power_readings_omits_power_and_the_rest_carry_on() -> None:
    gpu = collector(fake_gpus(2, no_power=[1]))
    reading = gpu.collect(time.time())
    for read in gpu.slow_reads():
        reading.merge(read.read(time.time()))
    samples = reading.samples["gpu"]
    with_power = [s for s in samples if s["gpu"] == 0]
    without = [s for s in samples if s["gpu"] == 1]
    assert any("power_w" in s for s in with_power) and any("energy_j" in s for s in with_power)
    for name in ("power_w", "power_instant_w", "power_limit_w", "energy_j"):
        assert all(name not in s for s in without)
    assert any("temp_gpu_c" in s for s in without)
    assert "power_limit_default_w" not in reading.gpu_info[1]["limits"]
    assert reading.events == []
    _valid(reading)


def test_gpu_falling_off_the_bus_mid_run_becomes_an_error_record() -> None:
    clock = TraceClock(IDLE_T)
    gpu = collector(fake_gpus(2, clock, lost_at={1: 20.0}))
    assert set(_by_gpu(gpu.collect(time.time()))) == {0, 1}
    clock.t = 25.0
    reading = gpu.collect(time.time())
    assert set(_by_gpu(reading)) == {0}
    assert [(e["kind"], e["gpu"]) for e in reading.events] == [("gpu_lost", 1)]
    later = gpu.collect(time.time())
    assert set(_by_gpu(later)) == {0} and later.events == []
    for read in gpu.slow_reads():  # slow reads of the lost GPU do not raise either
        read.read(time.time())
    _valid(reading)


def test_xid_event_arrives_with_its_code_and_meaning() -> None:
    fake = fake_gpus(2)
    gpu = collector(fake)
    try:
        fake.inject_xid(1, 79)
        events: list[dict[str, object]] = []
        deadline = time.monotonic() + 5
        while not events and time.monotonic() < deadline:
            events = gpu.collect(time.time()).events
            time.sleep(0.01)
        assert events == [
            {
                "ts": events[0]["ts"],
                "kind": "xid",
                "gpu": 1,
                "code": 79,
                "detail": "GPU has fallen off the bus",
            }
        ]
    finally:
        gpu.close()


def test_double_bit_ecc_event_is_reported_as_such() -> None:
    fake = fake_gpus(1)
    gpu = collector(fake)
    try:
        fake.inject_event(0, pynvml.nvmlEventTypeDoubleBitEccError)
        events: list[dict[str, object]] = []
        deadline = time.monotonic() + 5
        while not events and time.monotonic() < deadline:
            events = gpu.collect(time.time()).events
            time.sleep(0.01)
        assert [e["kind"] for e in events] == ["ecc_dbe"]
    finally:
        gpu.close()


def test_mig_instances_are_listed_in_gpu_info() -> None:
    layout = {0: [MigInstance("3g.71gb", 1, 0, 71_000), MigInstance("1g.18gb", 5, 0, 16_384)]}
    gpu = collector(fake_gpus(2, mig=layout))
    info = {i["gpu"]: i for i in gpu.collect(time.time()).gpu_info}
    assert info[0]["mig_mode"] is True
    assert [(m["gi"], m["profile"], m["mem_mib"]) for m in info[0]["mig"]] == [
        (1, "3g.71gb", 71_000),
        (5, "1g.18gb", 16_384),
    ]
    assert info[1]["mig_mode"] is False and info[1]["mig"] == []


def test_mig_layout_change_resends_gpu_info() -> None:
    fake = fake_gpus(1)
    gpu = collector(fake)
    gpu.collect(time.time())
    fake.mig[0] = [MigInstance("7g.141gb", 0, 0, 143_000)]
    for read in gpu.slow_reads():
        if read.name.endswith(":mig"):
            read.read(time.time())
    info = gpu.collect(time.time()).gpu_info
    assert info[0]["mig"][0]["profile"] == "7g.141gb"


def test_missing_nvml_disables_the_collector_with_a_reason() -> None:
    from agents.collectors.gpu import GpuCollector
    from agents.nvml.wrapper import Nvml, NvmlUnavailable

    class NoDriver:
        def nvmlInit(self) -> None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    try:
        GpuCollector(Nvml(NoDriver())).setup()
    except NvmlUnavailable as exc:
        assert "did not initialise" in str(exc)
    else:
        raise AssertionError("setup succeeded without a driver")


def test_nvlink_state_and_errors_are_read_where_links_exist() -> None:
    fake = fake_gpus(1, nvlinks=18)
    gpu = collector(fake)
    fake.nvlink_errors["crc"] = 3
    pcie = next(r for r in gpu.slow_reads() if r.name == "gpu0:pcie")
    for _ in range(2):  # the second read must still find the links
        sample = pcie.read(time.time()).samples["gpu"][0]
        assert sample["nvlink_up"] == 18
        assert sample["nvlink_crc_errors_total"] == 3
        assert sample["nvlink_replay_total"] == 0
    assert "pcie_replay_total" in sample
