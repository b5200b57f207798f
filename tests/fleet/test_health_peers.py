"""A GPU compared with its peers (issue 22): in a rack of 18 nodes × 4 GPUs, the one running
hotter than the others at the same power is found, with its temperature, their median and
spread and the power it ran at; a uniform (noisy) rack flags none, even with its GPUs at
different loads; a GPU slowed by heat where its peers are not is found by that alone; with
too few peers, or too few minutes, there is no judgement at all."""

from __future__ import annotations

import random

from fleet.health import peers as hp
from fleet.health import record as hr

RACK = ("hall", "rack", "GB200")


def rack_of_72(seed: int, hot: dict[int, float] | None = None) -> list[hp.GpuHour]:
    """18 nodes × 4 GPUs at loads from 500 W to 900 W: temperature rises 4 °C per 100 W,
    with 1.5 °C of noise; GPUs in `hot` run that much hotter."""
    rng = random.Random(seed)
    hours = []
    for i in range(72):
        power = rng.uniform(500, 900)
        temp = 30 + 0.04 * power + rng.gauss(0, 1.5) + (hot or {}).get(i, 0.0)
        hours.append(hp.GpuHour((i // 4, i % 4), RACK, 60, temp, power, 60, 0))
    return hours


def test_the_one_gpu_hotter_than_its_peers_at_the_same_power_is_found_with_the_comparison() -> None:
    hours = rack_of_72(seed=1, hot={41: 12.0})
    found = hp.compare(hours)
    assert len(found) == 72  # every GPU had enough peers to be judged
    assert [k for k, c in found.items() if c.hotter] == [(10, 1)]
    c = found[(10, 1)]
    assert c.peers >= hp.MIN_PEERS
    assert c.hotter_by_c > hp.HOTTER_MIN_C
    assert c.peers_spread_c < 3.0  # the noise, not the outlier, sets the spread
    verdict = hr.judge(hr.GpuFacts(peers=c), now=0.0)
    assert verdict.state == hr.WATCH
    (e,) = verdict.evidence
    assert e.criterion == "hotter than its peers"
    assert f"{c.temp_c:.1f} °C against its peers' median {c.peers_median_c:.1f} °C" in e.observed
    assert f"at {c.power_w:.0f} W" in e.observed
    assert e.source == "fleetwatch"


def test_a_uniform_noisy_rack_at_different_loads_flags_no_gpu() -> None:
    for seed in range(20):
        found = hp.compare(rack_of_72(seed))
        assert len(found) >= 66  # judged: a GPU alone at its load may have too few peers
        assert [k for k, c in found.items() if c.hotter or c.throttling] == [], seed


def test_a_gpu_slowed_by_heat_where_its_peers_are_not_is_found_by_that_alone() -> None:
    hours = [
        hp.GpuHour((0, i), RACK, 60, 65.0 + 0.1 * i, 700.0, 60, 30 if i == 3 else i % 2)
        for i in range(8)
    ]
    found = hp.compare(hours)
    assert [k for k, c in found.items() if c.throttling] == [(0, 3)]
    assert not any(c.hotter for c in found.values())
    c = found[(0, 3)]
    assert (c.throttled_share, c.peers_throttled_share) == (0.5, 0.0)
    (e,) = hr.judge(hr.GpuFacts(peers=c), now=0.0).evidence
    assert e.observed.startswith("slowed 50% of the last hour's minutes")
    assert "against its peers' median 0%" in e.observed


def test_too_few_peers_or_minutes_means_no_judgement() -> None:
    few = [hp.GpuHour((0, i), RACK, 60, 60.0, 700.0) for i in range(hp.MIN_PEERS - 1)]
    few.append(hp.GpuHour((0, 9), RACK, 60, 95.0, 700.0))  # hot, but one peer short
    assert hp.compare(few) == {}
    # enough GPUs, but its peers are at another model, another power, or barely reported
    mixed = [hp.GpuHour((1, 0), RACK, 60, 95.0, 700.0)]
    mixed += [hp.GpuHour((2, i), ("hall", "rack", "H100"), 60, 60.0, 700.0) for i in range(8)]
    mixed += [hp.GpuHour((3, i), RACK, 60, 40.0, 300.0) for i in range(8)]
    mixed += [hp.GpuHour((4, i), RACK, hp.MIN_MINUTES - 1, 60.0, 700.0) for i in range(8)]
    assert (1, 0) not in hp.compare(mixed)
    assert hr.judge(hr.GpuFacts(peers=None), now=0.0).state == hr.HEALTHY
