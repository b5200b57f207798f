"""The agent's slow-changing memory-error facts and its reset events (docs/agent.md): the
lifetime ECC counts and retired pages in `gpu_info`, "not_supported" where NVML says so (the
H200 has no page retirement), sent again when one changes; a GPU reset and a driver reload
become one event each, with the moment they were seen, while the agent runs and across its
own restart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pynvml
import pytest

from agents.collectors.base import Reading
from agents.collectors.gpu import GpuCollector
from agents.collectors.gpu_fields import MEMORY_ERROR_FIELDS
from agents.outbox import build_batch
from agents.protocol.memory import MEMORY_ERROR_KEYS
from agents.protocol.validate import validate_batch
from fleetsim.fake_nvml import FakeNvml
from tests.support.nvml_scenarios import TraceClock, collector, fake_gpus

SBE_AGG = pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL
DBE_AGG = pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL
RETIRED_SBE = pynvml.NVML_FI_DEV_RETIRED_SBE
RETIRED_DBE = pynvml.NVML_FI_DEV_RETIRED_DBE
RETIRED_PENDING = pynvml.NVML_FI_DEV_RETIRED_PENDING


def _valid(reading: Reading) -> None:
    validate_batch(build_batch("node:gpu-a01-01", 1, reading, {}), time.time() + 10)


def _slow(gpu: GpuCollector, name: str) -> Reading:
    """Run every slow read called `name` once, as the slow lane would."""
    reading = Reading()
    for read in gpu.slow_reads():
        if read.name.endswith(":" + name):
            reading.merge(read.read(time.time()))
    return reading


def test_the_agent_reads_the_fields_the_protocol_names() -> None:
    assert set(MEMORY_ERROR_FIELDS.values()) == set(MEMORY_ERROR_KEYS)


def test_the_h200_sends_its_aggregate_ecc_and_says_page_retirement_is_not_supported() -> None:
    gpu = collector(fake_gpus(1))
    reading = gpu.collect(time.time())
    assert reading.gpu_info[0]["memory_errors"] == {
        "ecc_sbe_agg_total": 0,
        "ecc_dbe_agg_total": 0,
        "retired_pages_sbe": "not_supported",
        "retired_pages_dbe": "not_supported",
        "retired_pages_pending": "not_supported",
    }
    _valid(reading)


def test_counts_are_sent_as_read_and_sent_again_only_when_one_changes() -> None:
    fake = fake_gpus(2)
    fake.memory_errors[1] = {SBE_AGG: 412, DBE_AGG: 3, RETIRED_SBE: 9, RETIRED_DBE: 61}
    fake.memory_errors[1][RETIRED_PENDING] = 1
    gpu = collector(fake)
    first = {i["gpu"]: i["memory_errors"] for i in gpu.collect(time.time()).gpu_info}
    assert first[1] == {
        "ecc_sbe_agg_total": 412,
        "ecc_dbe_agg_total": 3,
        "retired_pages_sbe": 9,
        "retired_pages_dbe": 61,
        "retired_pages_pending": 1,
    }
    _slow(gpu, "memory_errors")
    assert gpu.collect(time.time()).gpu_info == []  # nothing changed: not sent again

    fake.memory_errors[1][RETIRED_DBE] = 62
    _slow(gpu, "memory_errors")
    again = gpu.collect(time.time())
    assert {i["gpu"]: i["memory_errors"]["retired_pages_dbe"] for i in again.gpu_info} == {
        0: "not_supported",
        1: 62,
    }
    _valid(again)


def test_a_field_that_fails_keeps_its_last_count_and_sends_nothing_new() -> None:
    fake = fake_gpus(1)
    fake.memory_errors[0] = {DBE_AGG: 2}
    gpu = collector(fake)
    assert gpu.collect(time.time()).gpu_info[0]["memory_errors"]["ecc_dbe_agg_total"] == 2
    fake.memory_errors[0] = {DBE_AGG: f"ret={pynvml.NVML_ERROR_TIMEOUT}"}
    _slow(gpu, "memory_errors")
    assert gpu.collect(time.time()).gpu_info == []
    assert gpu.info[0]["memory_errors"]["ecc_dbe_agg_total"] == 2


def test_memory_errors_are_a_slow_read_staggered_across_gpus() -> None:
    gpu = collector(fake_gpus(4), memory_errors_every=60)
    reads = [r for r in gpu.slow_reads() if r.name.endswith(":memory_errors")]
    assert [(r.every_ticks, r.offset) for r in reads] == [(60, 0), (60, 15), (60, 30), (60, 45)]
    fast = collector(fake_gpus(1))
    fake = fast.nvml.lib
    assert isinstance(fake, FakeNvml)
    fast.collect(time.time())
    before = fake.stats.field_threads.get(RETIRED_DBE, set())
    fast.collect(time.time())
    assert fake.stats.field_threads.get(RETIRED_DBE, set()) == before  # not on the tick


def _energy(gpu: GpuCollector) -> list[dict[str, Any]]:
    _slow(gpu, "energy")
    return [e for e in gpu.collect(time.time()).events if e["kind"] != "note"]


def test_a_gpu_reset_while_the_agent_runs_is_one_event_with_its_time() -> None:
    clock = TraceClock(5.0)
    fake = fake_gpus(2, clock)
    gpu = collector(fake, watch_events=False)
    assert _energy(gpu) == []
    clock.t = 6.0
    fake.reset_gpu(1)
    seen_from = time.time()
    events = _energy(gpu)
    assert [(e["gpu"], e["kind"]) for e in events] == [(1, "gpu_reset")]
    assert seen_from - 1 <= events[0]["ts"] <= time.time() + 1
    assert "energy counter started again" in events[0]["detail"]
    clock.t = 8.0
    assert _energy(gpu) == []  # counted once
    reading = Reading(events=events)
    _valid(reading)


def test_a_replayed_trace_looping_is_not_a_reset() -> None:
    clock = TraceClock(100.0)
    fake = fake_gpus(1, clock)
    gpu = collector(fake, watch_events=False)
    _energy(gpu)
    clock.t = fake.trace_span_s + 1.0  # the trace starts over; the counter must not
    assert _energy(gpu) == []


def test_a_driver_reload_while_the_agent_runs_is_a_driver_reload() -> None:
    clock = TraceClock(5.0)
    fake = fake_gpus(2, clock)
    gpu = collector(fake, watch_events=False)
    _energy(gpu)
    fake.driver = "580.200.01"
    for index in (0, 1):
        fake.reset_gpu(index)
    events = _energy(gpu)
    assert sorted((e["gpu"], e["kind"]) for e in events) == [
        (0, "driver_reload"),
        (1, "driver_reload"),
    ]
    assert "580.159.04 → 580.200.01" in events[0]["detail"]


def _restart(fake: FakeNvml, state: Path, boot: Path) -> list[tuple[int, str]]:
    """A new start of the agent's GPU collector (the test changed the world meanwhile),
    until each GPU's energy counter has been read once on the slow lane, and stopped."""
    gpu = collector(fake, watch_events=False, state_path=state, boot_path=boot)
    events = gpu.collect(time.time()).events + _energy(gpu)
    gpu.close()
    return sorted((e["gpu"], e["kind"]) for e in events)


@pytest.fixture
def boot(tmp_path: Path) -> Path:
    path = tmp_path / "boot_id"
    path.write_text("3f1c2a4e-0000-4000-8000-000000000001\n")
    return path


def test_a_reset_while_the_agent_was_stopped_is_seen_at_its_start(
    tmp_path: Path, boot: Path
) -> None:
    clock = TraceClock(50.0)
    fake = fake_gpus(3, clock)
    state = tmp_path / "spool" / "gpu-resets.json"
    assert _restart(fake, state, boot) == []  # the first start: nothing to compare with
    assert _restart(fake, state, boot) == []  # a plain restart: nothing happened

    fake.reset_gpu(2)
    assert _restart(fake, state, boot) == [(2, "gpu_reset")]
    assert _restart(fake, state, boot) == []  # and only once


def test_every_counter_restarted_or_a_new_boot_or_driver_is_a_driver_reload(
    tmp_path: Path, boot: Path
) -> None:
    clock = TraceClock(50.0)
    fake = fake_gpus(2, clock)
    state = tmp_path / "gpu-resets.json"
    assert _restart(fake, state, boot) == []

    for index in (0, 1):
        fake.reset_gpu(index)
    assert _restart(fake, state, boot) == [(0, "driver_reload"), (1, "driver_reload")]

    boot.write_text("3f1c2a4e-0000-4000-8000-000000000002\n")  # the node rebooted
    assert _restart(fake, state, boot) == [(0, "driver_reload"), (1, "driver_reload")]

    fake.driver = "580.200.01"
    assert _restart(fake, state, boot) == [(0, "driver_reload"), (1, "driver_reload")]
    assert _restart(fake, state, boot) == []


def test_a_damaged_state_file_judges_nothing_and_is_written_afresh(
    tmp_path: Path, boot: Path
) -> None:
    fake = fake_gpus(1)
    state = tmp_path / "gpu-resets.json"
    state.write_text("{not json")
    assert _restart(fake, state, boot) == []
    fake.reset_gpu(0)
    assert _restart(fake, state, boot) == [(0, "gpu_reset")]


def test_the_restart_is_judged_on_the_slow_lane_not_at_start(tmp_path: Path, boot: Path) -> None:
    fake = fake_gpus(2)
    state = tmp_path / "gpu-resets.json"
    _restart(fake, state, boot)
    fake.reset_gpu(0)
    reads = fake.stats.by_call.get("nvmlDeviceGetTotalEnergyConsumption", 0)
    gpu = collector(fake, watch_events=False, state_path=state, boot_path=boot)
    assert fake.stats.by_call.get("nvmlDeviceGetTotalEnergyConsumption", 0) == reads
    assert gpu.collect(time.time()).events == []
    energy = {r.name: r for r in gpu.slow_reads() if r.name.endswith(":energy")}
    energy["gpu1:energy"].read(time.time())
    assert gpu.collect(time.time()).events == []  # GPU 0 not read yet: not judged yet
    energy["gpu0:energy"].read(time.time())
    assert [(e["gpu"], e["kind"]) for e in gpu.collect(time.time()).events] == [(0, "gpu_reset")]
