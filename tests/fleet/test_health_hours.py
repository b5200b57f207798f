"""The health record read from the GPUs' health hours (fleet/storage/health_hours.py) is the
record read from the tiers: an oracle over a recorded sequence — a reset, XIDs either side
of it, thermal slowdown and two runs of hot hours — rolled up by the real hourly rollup,
then read once from the stored hours and once from the tiers alone. The hours are sparse
(a healthy GPU keeps none), and a late minute that reveals a reset rewrites its hour."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from fleet.health.record import GpuFacts
from fleet.read.health_record import site_records
from fleet.storage.health_hours import TABLE, fill_history
from fleet.storage.rollups import rollup
from tests.support.databases import T
from tests.support.health_seed import Place, event, latest, minutes, site_with_gpus

pytestmark = pytest.mark.django_db

HOUR = 3600
HOURS = 6
NOW = T + (HOURS + 1) * HOUR
NS_PER_MIN = 40e9  # 40 s of every minute in HW thermal slowdown while hot


def sql(statement: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(statement, params or [])
        return list(cur.fetchall()) if cur.description else []


def seed_six_hours() -> Place:
    """GPU 0: reset at 02:20 (its energy counter starts again), XID 63 before and XID 94
    after, hot (89 °C against its 87 °C limit) in hours 1, 2 and 4 with thermal slowdown
    counting while hot. GPU 1: six quiet hours."""
    place = site_with_gpus()
    busy, quiet = place.gpus
    slowdown = 0.0
    rows_busy, rows_quiet = [], []
    for m in range(HOURS * 60):
        t = T + m * 60
        hot = m // 60 in (1, 2, 4)
        slowdown += NS_PER_MIN if hot else 0.0
        energy = 1e6 + 3e4 * m if m < 140 else 500.0 + 3e4 * (m - 140)
        rows_busy.append((t, {"energy_j": energy, "slowdown_hw_thermal_ns": slowdown,
                              "temp_gpu_c_max": 89.0 if hot else 80.0}))  # fmt: skip
        rows_quiet.append((t, {"energy_j": 2e6 + 3e4 * m, "slowdown_hw_thermal_ns": 0.0,
                               "temp_gpu_c_max": 70.0}))  # fmt: skip
    minutes(busy, rows_busy)
    minutes(quiet, rows_quiet)
    event(busy, T + 2 * HOUR + 5 * 60, code=63)
    event(busy, T + 3 * HOUR, code=94)
    for gpu, rows in ((busy, rows_busy), (quiet, rows_quiet)):
        latest(
            gpu, T + HOURS * HOUR - 1, slowdown_hw_thermal_ns=rows[-1][1]["slowdown_hw_thermal_ns"]
        )
    return place


def roll_up_hours() -> None:
    """The 1m tier is complete to the sixth hour; the hourly rollup runs as the beat runs it."""
    sql("DELETE FROM fw_rollup_state WHERE kind = 'gpu'")
    end = T + HOURS * HOUR
    sql(
        "INSERT INTO fw_rollup_state (tier, kind, done_until, sealed_until)"
        " VALUES ('1m', 'gpu', %s, %s), ('1h', 'gpu', %s, %s)",
        [end, end, T, T],
    )
    while rollup("1h", "gpu", NOW):
        pass


def from_tiers_alone() -> None:
    """As if the hourly rollup had passed nothing: the record reads every hour from tiers."""
    sql("UPDATE fw_rollup_state SET done_until = 0 WHERE tier = '1h' AND kind = 'gpu'")


def facts(place: Place) -> dict[int, GpuFacts]:
    return {r.index: r.facts for r in site_records(place.site.id, NOW)}


def test_the_record_from_stored_hours_is_the_record_from_the_tiers() -> None:
    place = seed_six_hours()
    roll_up_hours()
    stored = facts(place)
    busy = stored[0]
    assert busy.resets == 1 and busy.last_reset_ts == T + 140 * 60 + 60
    assert [x.code for x in busy.xids] == [94]  # XID 63 came before the reset
    assert busy.thermal_excursions == 2  # hours 1–2, then hour 4
    assert busy.thermal_slowdown_h == pytest.approx(3 * 60 * NS_PER_MIN / 1e9 / 3600)
    from_tiers_alone()
    assert facts(place) == stored


def test_a_healthy_gpu_keeps_no_health_hours_and_reads_zero_not_unknown() -> None:
    place = seed_six_hours()
    roll_up_hours()
    quiet = place.gpus[1]
    kept = sql(f"SELECT bucket FROM {TABLE} WHERE node_id = %s AND gpu = %s",
               [quiet.node_id, quiet.index])  # fmt: skip
    assert kept == []
    # GPU 0: its hot hours 1, 2 (its reset at 02:20 too) and 4
    assert sql(f"SELECT bucket FROM {TABLE} ORDER BY bucket") == [
        (T + h * HOUR,) for h in (1, 2, 4)
    ]
    record = facts(place)[1]
    assert (record.resets, record.thermal_excursions, record.thermal_slowdown_h) == (0, 0, 0.0)


def test_a_late_minute_that_shows_a_reset_rewrites_its_hour() -> None:
    place = seed_six_hours()
    roll_up_hours()
    quiet = place.gpus[1]
    # The 1m rollup recomputed 03:30 from late raw rows: the energy counter had started
    # again; it leaves a mark for the hour, as it does for hours the 1h tier has passed.
    minute = T + 3 * HOUR + 30 * 60
    sql(
        "UPDATE fw_gpu_1m SET energy_j_min = 100.0, energy_j_max = 100.0, energy_j_last = 100.0"
        " WHERE node_id = %s AND gpu = %s AND bucket = %s",
        [quiet.node_id, quiet.index, minute],
    )
    sql(
        "INSERT INTO fw_gpu_late (node_id, gpu, tier, bucket) VALUES (%s, %s, '1h', %s)",
        [quiet.node_id, quiet.index, T + 3 * HOUR],
    )
    while rollup("1h", "gpu", NOW):
        pass
    stored = facts(place)
    assert stored[1].resets == 1 and stored[1].last_reset_ts == minute + 60
    from_tiers_alone()
    assert facts(place) == stored


def fill_as_the_migration_does() -> None:
    """Migration 0028 on an installation that kept no health hours: the 30 days before the
    hourly tier's progress, from the tiers."""
    sql(f"DELETE FROM {TABLE}")
    with connection.cursor() as cur:
        fill_history(cur, T + HOURS * HOUR, 30 * 86_400)


def test_the_migration_fills_the_hours_the_rollup_would_have_kept() -> None:
    place = seed_six_hours()
    roll_up_hours()
    kept = sql(f"SELECT * FROM {TABLE} ORDER BY node_id, gpu, bucket")
    stored = facts(place)
    fill_as_the_migration_does()
    assert sql(f"SELECT * FROM {TABLE} ORDER BY node_id, gpu, bucket") == kept
    assert facts(place) == stored


def test_hours_past_the_minute_tier_are_filled_from_the_hourly_tier() -> None:
    """Retention took the minutes of hours 0-2: the reset at 02:20 is known to its hour."""
    place = seed_six_hours()
    roll_up_hours()
    sql("DELETE FROM fw_gpu_1m WHERE bucket < %s", [T + 3 * HOUR])
    fill_as_the_migration_does()
    busy = facts(place)[0]
    assert busy.resets == 1 and busy.last_reset_ts == T + 3 * HOUR
    assert busy.thermal_excursions == 2
    assert [x.code for x in busy.xids] == [94]
