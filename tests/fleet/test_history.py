"""Reading history (fleet/read/history.py) on every database tier: the tier that answers a
range, points bounded however long the range, rollup statistics as stored, throttle
reasons kept as masks, and clear refusals of what it cannot answer."""

from __future__ import annotations

from typing import Any

import pytest

from agents.protocol import reasons as nvml
from fleet.read.history import HistoryError, choose_tier, history, reason_spans
from fleet.storage.rollups import rollup
from fleet.storage.schema import raw_table
from tests.support import databases
from tests.support.databases import T, TierDb

HOUR = 3600.0
START = T - 2 * 3600  # two hours of samples, every 5 s, before T
COLUMNS = ("ts", "node_id", "gpu", "temp_gpu_c", "power_w", "clock_event_reasons")


db = databases.fresh_tier_db  # each test's own database, both tiers


def temp_at(t: int) -> float:
    return 50.0 + (t // 60) % 10  # steady within a minute: minute means are exact


def mask_at(t: int) -> int:
    """Idle, then 10 minutes of hardware thermal slowdown, then held at the power cap."""
    if t < START + 3600:
        return nvml.GPU_IDLE
    if t < START + 3600 + 600:
        return nvml.HW_THERMAL_SLOWDOWN
    return nvml.SW_POWER_CAP


def rows_for(node: int, gpu: int) -> list[tuple[Any, ...]]:
    out = []
    for t in range(START, T, 5):
        power = float(300 + (t % 60)) if gpu == 0 else 999.0  # GPU 1 must never leak in
        out.append((float(t), node, gpu, temp_at(t), power, mask_at(t)))
    return out


@pytest.fixture
def stored(db: TierDb) -> TierDb:
    db.insert(raw_table("gpu"), COLUMNS, rows_for(1, 0) + rows_for(1, 1))
    for tier in ("1m", "1h"):
        rollup(tier, "gpu", T + 60, using=db.alias)
    return db


def test_short_recent_ranges_read_raw_samples_longer_ones_the_rollups() -> None:
    now = T
    for vendor in ("sqlite", "postgresql"):
        assert choose_tier(now - 900, now, now, vendor) == "raw"
        assert choose_tier(now - 24 * HOUR, now, now, vendor) == "1m"
        assert choose_tier(now - 7 * 24 * HOUR, now, now, vendor) == "1h"
        # an hour from five hours ago: raw rows are gone after 3 h, the minutes remain
        assert choose_tier(now - 5 * HOUR, now - 4 * HOUR, now, vendor) == "1m"
    # an hour of raw rows is an index range on PostgreSQL, a scan of every GPU on SQLite
    assert choose_tier(now - HOUR, now, now, "postgresql") == "raw"
    assert choose_tier(now - HOUR, now, now, "sqlite") == "1m"


def test_a_raw_range_returns_the_samples_of_that_gpu_only(stored: TierDb) -> None:
    h = history("gpu", (1, 0), ["temp_gpu_c", "power_w"], T - 60, T, now=T, using=stored.alias)
    assert h.tier == "raw" and h.step_s == 1
    times = [t for t, _ in h.series["power_w"].points]
    assert times == [float(t) for t in range(T - 60, T, 5)]
    assert [v for _, v in h.series["power_w"].points] == [
        float(300 + t % 60) for t in range(T - 60, T, 5)
    ]
    assert all(v == temp_at(T - 60) for _, v in h.series["temp_gpu_c"].points)


def test_a_long_raw_range_is_bucketed_to_at_most_max_points(stored: TierDb) -> None:
    h = history("gpu", (1, 0), ["power_w"], T - 900, T, 50, now=T, using=stored.alias)
    s = h.series["power_w"]
    assert h.tier == "raw" and len(s.points) <= 50
    assert h.step_s == 19  # ceil(900 / 49)
    first = [float(300 + t % 60) for t in range(START, T, 5) if T - 900 <= t < T]
    assert s.min[0] is not None and s.max[0] is not None
    assert min(first) <= s.min[0] <= s.points[0][1] <= s.max[0] <= max(first)  # type: ignore[operator]


def test_minutes_not_yet_rolled_up_come_from_the_raw_samples(db: TierDb) -> None:
    db.insert(raw_table("gpu"), COLUMNS, rows_for(1, 0))
    rollup("1m", "gpu", T - 1800 + 15, using=db.alias)  # the minutes of the last 30 min: not yet
    h = history("gpu", (1, 0), ["power_w"], T - 24 * HOUR, T, 2000, now=T, using=db.alias)
    assert h.tier == "1m" and h.parts == [("1m", T - 24 * HOUR, T - 1800), ("raw", T - 1800, T)]
    power = h.series["power_w"]
    assert [t for t, _ in power.points] == [float(t) for t in range(START, T, 60)]
    assert power.min[-1] == 300.0 and power.max[-1] == 355.0  # the last minute, from raw
    assert power.points[-1][1] == pytest.approx(sum(range(300, 360, 5)) / 12)
    _, spans = reason_spans((1, 0), T - 24 * HOUR, T, 2000, now=T, using=db.alias)
    assert spans[-1].mask == nvml.SW_POWER_CAP and spans[-1].end == T


def test_a_day_reads_the_minute_rollups_with_min_mean_and_max(stored: TierDb) -> None:
    h = history("gpu", (1, 0), ["power_w", "temp_gpu_c"], T - 24 * HOUR, T, 2000, now=T,
                using=stored.alias)  # fmt: skip
    assert h.tier == "1m" and h.step_s == 60
    power = h.series["power_w"]
    assert len(power.points) == 120  # two hours of minutes
    assert power.points[0][0] == START
    assert power.min[0] == 300.0 and power.max[0] == 355.0
    assert power.points[0][1] == pytest.approx(sum(range(300, 360, 5)) / 12)
    temps = {t: v for t, v in h.series["temp_gpu_c"].points}
    assert temps[float(START + 600)] == temp_at(START + 600)


def test_a_week_reads_the_hour_rollups(stored: TierDb) -> None:
    h = history("gpu", (1, 0), ["power_w"], T - 7 * 24 * HOUR, T, now=T, using=stored.alias)
    assert h.tier == "1h" and h.step_s >= 3600
    assert [t for t, _ in h.series["power_w"].points] == [START, START + 3600]
    assert h.series["power_w"].max == [355.0, 355.0]


def test_a_field_the_gpu_never_sent_reads_none_not_zero(stored: TierDb) -> None:
    h = history("gpu", (1, 0), ["fan_pct"], T - 60, T, now=T, using=stored.alias)
    assert h.series["fan_pct"].points and all(v is None for _, v in h.series["fan_pct"].points)


def test_throttle_reasons_come_back_as_spans_of_one_mask(stored: TierDb) -> None:
    tier, spans = reason_spans((1, 0), T - 24 * HOUR, T, 2000, now=T, using=stored.alias)
    assert tier == "1m"
    assert [(s.start, s.end, s.mask) for s in spans] == [
        (START, START + 3600, nvml.GPU_IDLE),
        (START + 3600, START + 4200, nvml.HW_THERMAL_SLOWDOWN),
        (START + 4200, T, nvml.SW_POWER_CAP),
    ]
    tier, raw = reason_spans((1, 0), T - 900, T, now=T, using=stored.alias)
    assert tier == "raw" and {s.mask for s in raw} == {nvml.SW_POWER_CAP}


def test_a_bucket_holding_two_masks_keeps_both_reasons(stored: TierDb) -> None:
    # 15-minute buckets over the raw range: the one where thermal slowdown ends has both
    _, spans = reason_spans((1, 0), START + 3000, START + 4800, 3, now=T, using=stored.alias)
    assert any(s.mask == nvml.HW_THERMAL_SLOWDOWN | nvml.SW_POWER_CAP for s in spans)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("pdu", (1,), ["power_w"], T - 60, T), "kind"),
        (("gpu", (1, 0), ["watts"], T - 60, T), "metric"),
        (("gpu", (1, 0), [], T - 60, T), "metric"),
        (("gpu", (1,), ["power_w"], T - 60, T), "key"),
        (("gpu", (1, 0), ["power_w"], T, T - 60), "start"),
        (("gpu", (1, 0), ["power_w"], T - 400 * 24 * HOUR, T), "range"),
    ],
)
def test_requests_history_cannot_answer_are_refused_naming_the_field(
    args: tuple[Any, ...], field: str
) -> None:
    with pytest.raises(HistoryError) as refused:
        history(*args, now=T)
    assert refused.value.field == field and refused.value.reason
