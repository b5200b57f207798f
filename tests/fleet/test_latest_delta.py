"""What an ingest child remembers between saves, and the rows it merges (no database)."""

from __future__ import annotations

from fleet.storage.latest import LatestDelta, merge_columns


def rows_by_key(delta: LatestDelta, kind: str = "gpu") -> dict[tuple[int, ...], dict[str, object]]:
    out: dict[tuple[int, ...], dict[str, object]] = {}
    for fields, rows in delta.shaped_rows(kind).items():
        columns = merge_columns(kind, fields)
        for row in rows:
            record = dict(zip(columns, row, strict=True))
            out[(int(row[0]), int(row[1]))] = record
    return out


def test_the_newest_value_of_each_field_wins_and_keeps_its_own_time() -> None:
    delta = LatestDelta()
    delta.add("gpu", (1, 0), {"ts": 100.0, "gpu": 0, "temp_gpu_c": 50, "energy_j": 9.0}, 1e9)
    delta.add("gpu", (1, 0), {"ts": 101.0, "gpu": 0, "temp_gpu_c": 51}, 1e9)
    row = rows_by_key(delta)[(1, 0)]
    assert (row["temp_gpu_c"], row["temp_gpu_c_ts"]) == (51, 101.0)
    assert (row["energy_j"], row["energy_j_ts"]) == (9.0, 100.0)
    assert row["ts"] == 101.0


def test_a_sample_arriving_late_does_not_overwrite_a_newer_one() -> None:
    delta = LatestDelta()
    delta.add("gpu", (1, 0), {"ts": 105.0, "gpu": 0, "temp_gpu_c": 70}, 1e9)
    delta.add("gpu", (1, 0), {"ts": 100.0, "gpu": 0, "temp_gpu_c": 50, "fan_pct": 30.0}, 1e9)
    row = rows_by_key(delta)[(1, 0)]
    assert (row["temp_gpu_c"], row["temp_gpu_c_ts"]) == (70, 105.0)
    assert (row["fan_pct"], row["fan_pct_ts"]) == (30.0, 100.0)  # only the old one had it


def test_a_clock_running_ahead_counts_as_now() -> None:
    delta = LatestDelta()
    delta.add("gpu", (1, 0), {"ts": 5_000.0, "gpu": 0, "temp_gpu_c": 50}, 1_000.0)
    assert rows_by_key(delta)[(1, 0)]["temp_gpu_c_ts"] == 1_000.0


def test_entities_of_one_shape_share_one_statement() -> None:
    delta = LatestDelta()
    for gpu in range(8):
        delta.add("gpu", (1, gpu), {"ts": 1.0, "gpu": gpu, "temp_gpu_c": 50, "power_w": 9.0}, 9.0)
    delta.add("gpu", (2, 0), {"ts": 1.0, "gpu": 0, "temp_gpu_c": 50}, 9.0)
    shapes = delta.shaped_rows("gpu")
    assert sorted(len(rows) for rows in shapes.values()) == [1, 8]
    assert len(delta) == 9 and delta.changed()["gpu"]
