from __future__ import annotations

import threading
import time

import pynvml

from agents.collectors.base import Reading, SlowRead
from agents.runner import CollectorSet
from agents.schedule import SlowLane, Ticker, merge_slow
from tests.support.nvml_scenarios import collector, fake_gpus

SLOW_CALLS = ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPcieThroughput")
THROTTLE_FIELD = pynvml.NVML_FI_DEV_PERF_POLICY_POWER


def _run_ticks(collectors: CollectorSet, ticks: int) -> list[Reading]:
    readings = []
    for tick in range(ticks):
        readings.append(collectors.collect(time.time(), tick))
        assert collectors.lane.wait_idle(10)  # as if a second passed between ticks
    assert collectors.lane.wait_idle(10)  # let the last slow reads finish
    collectors.lane.close()
    return readings


def test_slow_nvml_calls_never_run_on_the_tick_thread() -> None:
    fake = fake_gpus(4)
    gpu = collector(fake, watch_events=False, pcie_throughput_every=20)
    collectors = CollectorSet([gpu], interval_s=1.0)
    _run_ticks(collectors, 60)
    tick_thread = threading.current_thread().name
    for call in SLOW_CALLS:
        assert fake.stats.threads[call] and tick_thread not in fake.stats.threads[call]
    assert tick_thread not in fake.stats.field_threads[THROTTLE_FIELD]
    assert tick_thread in fake.stats.threads["nvmlDeviceGetPowerUsage"]


def test_slow_reads_run_at_their_cadence_not_every_tick() -> None:
    fake = fake_gpus(4)
    collectors = CollectorSet([collector(fake, watch_events=False)], interval_s=1.0)
    readings = _run_ticks(collectors, 60)
    assert fake.stats.by_call["nvmlDeviceGetTotalEnergyConsumption"] == 4 * 60 // 30
    # Every 5 minutes, staggered: in the first minute only GPU 0's TX and RX reads.
    assert fake.stats.by_call["nvmlDeviceGetPcieThroughput"] == 2
    assert fake.stats.field_threads[pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER]
    assert fake.stats.by_call["nvmlDeviceGetPowerUsage"] == 4 * 60
    energy_ticks = [
        i for i, r in enumerate(readings) if any("energy_j" in s for s in r.samples["gpu"])
    ]
    # Staggered: each GPU's energy read lands on a tick of its own, a minute holds two per GPU.
    assert len(energy_ticks) == 8


def test_a_stuck_slow_read_neither_delays_the_tick_nor_queues_up() -> None:
    fake = fake_gpus(1)
    release = threading.Event()

    def hold() -> None:
        release.wait(10)

    fake.before["nvmlDeviceGetTotalEnergyConsumption"] = hold
    collectors = CollectorSet([collector(fake, watch_events=False, energy_every=2)], 1.0)
    try:
        readings = [collectors.collect(time.time(), tick) for tick in range(10)]
    finally:
        release.set()
    assert collectors.lane.wait_idle(10)
    assert all(r.samples["gpu"][0].get("power_w") for r in readings)  # every tick sampled
    assert collectors.lane.skipped >= 4  # the due energy reads were skipped, not stacked
    collectors.lane.close()
    assert fake.stats.by_call["nvmlDeviceGetTotalEnergyConsumption"] == 1


def test_a_failing_slow_read_is_reported_once_and_the_tick_goes_on() -> None:
    def broken(now: float) -> Reading:
        raise RuntimeError("sensor bus timeout")

    class Quiet:
        name = "quiet"
        interval_s = 1.0

        def setup(self) -> None: ...

        def collect(self, now: float) -> Reading:
            reading = Reading()
            reading.add("node", {"ts": now, "cpu_pct": 1.0})
            return reading

        def close(self) -> None: ...

        def slow_reads(self) -> list[SlowRead]:
            return [SlowRead("quiet:broken", 1, 0, broken)]

    collectors = CollectorSet([Quiet()], 1.0)
    events = []
    for tick in range(5):
        reading = collectors.collect(time.time(), tick)
        events.extend(reading.events)
        assert collectors.lane.wait_idle(5)
    assert len([e for e in events if "sensor bus timeout" in e["detail"]]) == 1


def test_a_collector_that_cannot_start_is_reported_and_the_others_run() -> None:
    class Broken:
        name = "broken"
        interval_s = 1.0

        def setup(self) -> None:
            raise FileNotFoundError("/dev/ipmi0")

        def collect(self, now: float) -> Reading:
            raise AssertionError("never asked")

        def close(self) -> None: ...

    fake = fake_gpus(1)
    collectors = CollectorSet([Broken(), collector(fake, watch_events=False)], 1.0)
    reading = collectors.collect(time.time(), 0)
    assert [c.name for c in collectors.active] == ["gpu"]
    assert reading.samples["gpu"]
    assert reading.events[0]["kind"] == "collector_error"
    assert "broken: disabled" in reading.events[0]["detail"]
    collectors.close()


def test_merge_puts_slow_fields_into_the_same_gpu_sample() -> None:
    tick = Reading()
    tick.add("gpu", {"ts": 10.0, "gpu": 0, "power_w": 80.0})
    tick.add("gpu", {"ts": 10.0, "gpu": 1, "power_w": 81.0})
    slow = Reading()
    slow.add("gpu", {"ts": 9.0, "gpu": 1, "energy_j": 123.0})
    slow.add("gpu", {"ts": 9.0, "gpu": 7, "energy_j": 5.0})  # lost meanwhile: dropped
    merge_slow(tick, slow)
    assert tick.samples["gpu"] == [
        {"ts": 10.0, "gpu": 0, "power_w": 80.0},
        {"ts": 10.0, "gpu": 1, "power_w": 81.0, "energy_j": 123.0},
    ]


def test_slow_lane_staggers_reads_by_offset() -> None:
    ran: list[tuple[int, str]] = []
    tick_now = [0]

    def read_as(name: str):  # type: ignore[no-untyped-def]
        def read(now: float) -> Reading:
            ran.append((tick_now[0], name))
            return Reading()

        return read

    lane = SlowLane([SlowRead("a", 4, 0, read_as("a")), SlowRead("b", 4, 2, read_as("b"))])
    for tick in range(8):
        tick_now[0] = tick
        lane.submit_due(tick, 0.0)
        assert lane.wait_idle(5)
    assert sorted(ran) == [(0, "a"), (2, "b"), (4, "a"), (6, "b")]


class FakeClock:
    """Time that moves only when the test (sleeping, or working) says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def test_ticker_skips_and_counts_ticks_it_could_not_keep() -> None:
    clock = FakeClock()
    ticker = Ticker(1.0, clock=clock, sleep=clock.sleep, wall=clock)
    stamps: list[float] = []
    async for ts in ticker.ticks():
        stamps.append(ts)
        clock.now += 3.5 if len(stamps) == 3 else 0.2  # the third tick's work overran
        if len(stamps) == 6:
            break
    assert ticker.skipped == 3
    # Back on the grid after the overrun, no burst of late ticks: 0 1 2 | 6 7 8.
    assert [s - stamps[0] for s in stamps] == [0.0, 1.0, 2.0, 6.0, 7.0, 8.0]


async def test_ticker_keeps_its_grid_without_drift() -> None:
    clock = FakeClock()
    ticker = Ticker(0.5, clock=clock, sleep=clock.sleep, wall=clock)
    stamps: list[float] = []
    async for ts in ticker.ticks():
        stamps.append(ts)
        clock.now += 0.37  # work inside the interval must not push later ticks back
        if len(stamps) == 11:
            break
    assert ticker.skipped == 0
    assert [s - stamps[0] for s in stamps] == [0.5 * i for i in range(11)]
