"""The oracle for the rollup tables: a known series (several GPUs and nodes, a slow field
present in only some samples, a counter, an integer gauge) written straight into the raw
tables, and what its 1-minute and 1-hour rollups must hold, computed here in Python from
the same rows."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.storage.rollups import rollup
from fleet.storage.schema import ENTITY_COLUMNS, raw_table, rollup_table
from tests.support.databases import TierDb

GPUS = [(1, 0), (1, 1), (2, 0)]
NODES = [(1,), (2,)]
GPU_METRICS = ("util_gpu_pct", "mem_total_mib", "energy_j", "pstate")
NODE_METRICS = ("cpu_pct", "temp_inlet_c")
METRICS_OF = {"gpu": GPU_METRICS, "node": NODE_METRICS}


def gpu_row(t: int, node: int, gpu: int) -> tuple[Any, ...]:
    entity = node * 10 + gpu
    util = float((t * 7 + 13 * entity) % 101)  # jumps around: min/max/last all differ
    slow = float(1000 + (t // 30) % 5 * 10 + entity) if t % 30 == 0 else None  # every 30 s
    energy = 1e6 + t % 100_000 * 300.0 + entity  # a counter, rising
    pstate = (t // 10 + entity) % 3  # an integer gauge
    return (float(t), node, gpu, util, slow, energy, pstate)


def node_row(t: int, node: int) -> tuple[Any, ...]:
    cpu = float((t * 3 + node) % 89) + 0.5
    inlet = 20.0 + (t // 20) % 7 + node if t % 20 == 0 else None  # every 20 s
    return (float(t), node, cpu, inlet)


def series(start: int, stop: int, every: int = 5) -> dict[str, list[tuple[Any, ...]]]:
    times = range(start, stop, every)
    return {
        "gpu": [gpu_row(t, n, g) for t in times for n, g in GPUS],
        "node": [node_row(t, n) for t in times for (n,) in NODES],
    }


def store_raw(db: TierDb, rows: dict[str, list[tuple[Any, ...]]]) -> None:
    for kind, kind_rows in rows.items():
        columns = ("ts", *ENTITY_COLUMNS[kind], *METRICS_OF[kind])
        db.insert(raw_table(kind), columns, kind_rows)


Stats = tuple[int, tuple[Any, ...]]  # n, then (min, mean, max, last) per metric


def expected(kind: str, rows: list[tuple[Any, ...]], step: int, before: int) -> dict[Any, Stats]:
    """What a rollup of `step` seconds must hold for buckets starting before `before`.

    Hour means are the minute means weighted by each minute's row count: exact
    for fields every sample carries, an approximation for slow fields.
    """
    nkeys = len(ENTITY_COLUMNS[kind])
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in rows:
        bucket = int(row[0]) // step * step
        if bucket < before:
            groups.setdefault((*row[1 : 1 + nkeys], bucket), []).append(row)
    out: dict[Any, Stats] = {}
    for key, members in groups.items():
        members.sort(key=lambda r: r[0])
        stats: list[Any] = []
        for i in range(len(METRICS_OF[kind])):
            values = [r[1 + nkeys + i] for r in members if r[1 + nkeys + i] is not None]
            mean = sum(values) / len(values) if step == 60 else _hour_mean(members, nkeys + 1 + i)
            stats += [min(values), pytest.approx(mean), max(values)]
            stats.append(values[-1])  # the newest sample that carries the field
        out[key] = (len(members), tuple(stats))
    return out


def _hour_mean(rows: list[tuple[Any, ...]], col: int) -> float:
    minutes: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        minutes.setdefault(int(row[0]) // 60, []).append(row)
    weighted = weight = 0.0
    for members in minutes.values():
        values = [r[col] for r in members if r[col] is not None]
        if values:
            weighted += sum(values) / len(values) * len(members)
            weight += len(members)
    return weighted / weight


def stored(db: TierDb, kind: str, tier: str) -> dict[Any, Stats]:
    keys = ENTITY_COLUMNS[kind]
    stats = [f"{m}_{s}" for m in METRICS_OF[kind] for s in ("min", "mean", "max", "last")]
    rows = db.execute(
        f"SELECT {', '.join((*keys, 'bucket', 'n', *stats))} FROM {rollup_table(kind, tier)}"
    )
    width = len(keys) + 1
    return {tuple(r[:width]): (r[width], tuple(r[width + 1 :])) for r in rows}


def roll(db: TierDb, now: float) -> None:
    for tier in ("1m", "1h"):
        for kind in METRICS_OF:
            rollup(tier, kind, now, using=db.alias)
