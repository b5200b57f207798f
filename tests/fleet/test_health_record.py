"""The health record from recorded sequences (issue 22): a pending row remap needs a reset,
and once the GPU is reset (its counters start again in the 1m tier, the pending flag clears)
it is healthy, the XIDs before the reset no longer counted; a remap failure means replace;
falling off the bus twice in a week means replace, once (or twice further apart) watch.
Each state comes with its evidence: the criterion, what was observed, and its source."""

from __future__ import annotations

import pytest

from fleet.health import record as hr
from fleet.read.health_record import gpu_record, node_records, site_records
from tests.support.databases import T
from tests.support.health_seed import counter_run, event, latest, minutes, site_with_gpus

pytestmark = pytest.mark.django_db

DAY = 86_400
HOUR = 3600


def sources(verdict: hr.Verdict) -> set[str]:
    return {e.source for e in verdict.evidence}


def test_a_pending_remap_needs_a_reset_and_the_gpu_is_healthy_after_it() -> None:
    place = site_with_gpus()
    gpu = place.gpus[0]
    # 10:00–10:10 the GPU works; at 10:05 an uncorrectable error is remapped: XID 63, pending
    minutes(gpu, counter_run(T, 5, held={"remap_pending": 0}, energy_j=5e6))
    minutes(gpu, counter_run(T + 300, 5, held={"remap_pending": 1}, energy_j=5.005e6))
    event(gpu, T + 310, code=63)
    latest(gpu, T + 590, remap_pending=1, remap_failure=0, remapped_rows_correctable=1)

    before = gpu_record(gpu.id, T + 600)
    assert before is not None
    assert before.state == hr.RESET_NEEDED
    first = before.verdict.evidence[0]
    assert (first.criterion, first.observed, first.source) == (
        "row remap pending: takes effect at the next GPU reset",
        "remap_pending = 1",
        "row-remapping",
    )
    assert first.url.startswith("https://docs.nvidia.com/")
    assert [(x.code, x.count) for x in before.facts.xids] == [(63, 1)]

    # 10:20 it is drained and reset: the energy counter starts again, the flag clears
    minutes(gpu, counter_run(T + 1200, 5, held={"remap_pending": 0}, energy_j=2000.0))
    latest(gpu, T + 1490, remap_pending=0, remap_failure=0, remapped_rows_correctable=1)

    after = gpu_record(gpu.id, T + 1500)
    assert after is not None
    assert after.state == hr.HEALTHY
    assert after.verdict.evidence == ()
    assert after.facts.xids == ()  # XID 63 came before the reset
    assert after.facts.resets == 1
    assert after.facts.last_reset_ts == T + 1260  # the end of the minute it was seen in
    assert after.facts.remapped_correctable == 1  # the remap itself is permanent


def test_a_remap_failure_means_replace() -> None:
    place = site_with_gpus()
    gpu = place.gpus[1]
    event(gpu, T + 100, code=64)
    latest(gpu, T + 120, remap_pending=0, remap_failure=1, remapped_rows_uncorrectable=8)

    r = gpu_record(gpu.id, T + 200)
    assert r is not None
    assert r.state == hr.REPLACE
    first = r.verdict.evidence[0]
    assert first.observed == "remap_failure = 1"
    assert first.source == "remap-rma"
    assert "rma-policy-thresholds-for-row-remapping" in first.url
    # the XID that failed to record the remap is in the evidence too, as needing a reset
    assert any(e.criterion.endswith("XID 64") for e in r.verdict.evidence)


def fall_off_the_bus(gpu_at: float, place_gpu: object) -> None:
    """The driver's XID 79 and, a second later, the agent's gpu_lost: one episode."""
    event(place_gpu, gpu_at, code=79)  # type: ignore[arg-type]
    event(place_gpu, gpu_at + 1, kind="gpu_lost")  # type: ignore[arg-type]


def test_falling_off_the_bus_twice_in_a_week_means_replace() -> None:
    place = site_with_gpus()
    gpu = place.gpus[0]
    minutes(gpu, counter_run(T - 2 * HOUR, 2, step=HOUR, energy_j=9e9), tier="1h")
    fall_off_the_bus(T, gpu)
    minutes(gpu, counter_run(T + HOUR, 2, step=HOUR, energy_j=100.0), tier="1h")  # rebooted
    fall_off_the_bus(T + 4 * DAY, gpu)
    now = T + 4 * DAY + 600

    r = gpu_record(gpu.id, now)
    assert r is not None
    assert r.state == hr.REPLACE
    assert list(r.facts.off_the_bus) == [T, T + 4 * DAY]
    assert r.facts.resets == 1  # the reboot after the first fall
    replace = [e for e in r.verdict.evidence if e.source == "fleetwatch"]
    assert replace[0].criterion == "fell off the bus 2 times in 7 days"
    assert replace[0].observed == "2 episodes in 7 days"
    # the second fall has not been recovered from yet: a reboot is needed as well
    assert any(e.criterion == "XID that needs a node reboot: XID 79" for e in r.verdict.evidence)


def test_falling_off_the_bus_once_or_twice_eight_days_apart_is_watch() -> None:
    place = site_with_gpus(per_node=2)
    once, apart = place.gpus
    fall_off_the_bus(T, once)
    fall_off_the_bus(T - 8 * DAY, apart)
    fall_off_the_bus(T, apart)
    for gpu in (once, apart):  # working before the fall, rebooted since and reporting
        minutes(gpu, counter_run(T - 300, 5, energy_j=9e6))
        minutes(gpu, counter_run(T + 600, 3, energy_j=100.0))
    now = T + DAY

    states = {r.index: r for r in site_records(place.site.id, now)}
    for r in states.values():
        assert r.state == hr.WATCH
        assert [(e.criterion, e.observed) for e in r.verdict.evidence] == [
            ("fell off the bus in the last 7 days", "1 episode")
        ]
    assert len(states[1].facts.off_the_bus) == 2  # both in the record, one in the window


def test_xids_that_need_a_reset_and_come_back_after_it_mean_replace() -> None:
    place = site_with_gpus()
    gpu = place.gpus[0]
    event(gpu, T + 60, code=95)
    minutes(gpu, counter_run(T, 5, energy_j=9e6))
    minutes(gpu, counter_run(T + 600, 3, held={"ecc_dbe_vol_total": 0}, energy_j=100.0))
    assert gpu_record(gpu.id, T + 900).state == hr.HEALTHY  # type: ignore[union-attr]
    event(gpu, T + 1000, code=95)

    r = gpu_record(gpu.id, T + 1100)
    assert r is not None
    assert r.state == hr.REPLACE
    assert r.verdict.evidence[0].source == "xid-checks"
    assert r.verdict.evidence[0].observed == "1 time since the last reset"


def test_thermal_time_and_excursions_past_slowdown_put_a_gpu_on_watch() -> None:
    place = site_with_gpus()
    hot, cool = place.gpus
    ns_per_h = 40 * 60 * 1e9  # 40 minutes of each hour in HW thermal slowdown
    hours = [
        (T + k * HOUR, {"slowdown_hw_thermal_ns": 1e12 + ns_per_h * k,
                        "slowdown_sw_thermal_ns": 1e9 * k,
                        "temp_gpu_c_max": 88.0 if k in (1, 2, 5) else 80.0})
        for k in range(6)
    ]  # fmt: skip
    minutes(hot, hours, tier="1h")
    minutes(cool, [(T + k * HOUR, {"temp_gpu_c_max": 70.0}) for k in range(6)], tier="1h")

    records = {r.index: r for r in site_records(place.site.id, T + 6 * HOUR)}
    assert records[0].state == hr.WATCH
    assert records[0].facts.thermal_excursions == 2  # hours 1–2, then hour 5
    assert records[0].facts.thermal_slowdown_h == pytest.approx(5 * 40 / 60 + 0.0, rel=1e-6)
    assert sources(records[0].verdict) == {"thermal"}
    assert records[1].state == hr.HEALTHY
    assert records[1].facts.thermal_excursions == 0
    assert records[1].facts.thermal_slowdown_h is None  # no slowdown counters: not zero


def test_the_site_lists_worst_first_and_nodes_take_their_worst_gpu() -> None:
    place = site_with_gpus(nodes=2, per_node=2)
    broken = place.gpus[3]
    latest(broken, T, remap_failure=1)
    latest(place.gpus[0], T, remap_failure=0, remap_pending=0)

    records = site_records(place.site.id, T + 60)
    assert (records[0].node, records[0].index, records[0].state) == (
        broken.node.name,
        1,
        hr.REPLACE,
    )
    assert records[0].serial == "1652310001"
    assert {r.state for r in records[1:]} == {hr.HEALTHY}
    nodes = {n.node: n for n in node_records(records)}
    assert nodes[broken.node.name].state == hr.REPLACE
    assert nodes[broken.node.name].counts[hr.REPLACE] == 1
    assert nodes[place.gpus[0].node.name].state == hr.HEALTHY
    assert site_records(place.site.id + 99, T) == []


def test_fields_the_agent_does_not_send_are_absent_not_zero() -> None:
    place = site_with_gpus()
    latest(place.gpus[0], T, ecc_sbe_vol_total=3)
    r = gpu_record(place.gpus[0].id, T + 10)
    assert r is not None
    assert r.facts.ecc_sbe_volatile == 3
    assert r.facts.ecc_sbe_aggregate is None
    assert r.facts.retired_pages is None
    assert r.facts.remap_pending is None
