"""The oracle for the fleet overview's SQL path: on both engines, random latest states
(fields fresh, stale, on the staleness boundary or missing; GPUs without limits, with the
T.Limit form only, without an inventory row; each limit entered, reported, or both with the
agent reporting another value, the entered one in force on both paths; clock-event masks with
every reason bit and unknown ones; headroom on and past its thresholds; power that rounds on
a .x5) must give exactly the rack payloads that reading and judging every GPU in Python gives
— lost GPUs (their node fresh, they stale) counted and critical on both.

`fleet.read.state.rack_summaries` (GPUs folded per node by `fleet.read.summaries_sql`) against
`fleet.read.state.rack_states` (every GPU's reading through `fleet.health`), in a database of
its own per test (tests/support/databases.py).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.db.models import F

from agents.protocol import reasons as nvml
from fleet import health
from fleet.models import GPU, CoolingLoop, Hall, Node, Rack, Site
from fleet.read import site_summary, state
from fleet.storage.latest import latest_columns, metric_names
from tests.support import databases
from tests.support.databases import TierDb

NOW = 1_800_000_000.25
STALE = health.STALE_AFTER_S
CALM = ("calm", "warm")  # rack modes: fresh, nothing past warn
MASK_BITS = [bit for bit, _, _ in nvml.REASONS] + [0x200, 1 << 40]


tdb = databases.fresh_tier_db  # each test's own database, both tiers


def sample_time(rng: random.Random, mode: str = "mixed") -> float:
    """Mostly fresh, often stale, sometimes right on either side of the boundary (a calm
    rack: fresh; a quiet one: stale)."""
    if mode in CALM:
        return NOW - rng.uniform(0, 5)
    if mode == "quiet":
        return NOW - rng.uniform(STALE, 900)
    return rng.choice(
        [
            NOW - rng.uniform(0, 5),
            NOW - rng.uniform(0, 25),
            NOW - rng.uniform(31, 600),
            NOW - STALE,
            NOW - STALE + 0.001,
            NOW + 2,  # a clock running ahead
        ]
    )


def latest_row(
    rng: random.Random,
    kind: str,
    key: tuple[int, ...],
    values: dict[str, Any],
    mode: str = "mixed",
) -> list[Any]:
    """A `fw_<kind>_latest` row: each given field with its own sample time (or, rarely,
    none), the row's `ts` mostly their newest, sometimes not (data written by hand)."""
    times: dict[str, float | None] = {}
    for name in values:
        missing = mode == "mixed" and rng.random() < 0.03
        times[name] = None if missing else sample_time(rng, mode)
    known = [t for t in times.values() if t is not None]
    consistent = mode != "mixed" or rng.random() < 0.85
    ts = max(known) if known and consistent else sample_time(rng, mode)
    row: list[Any] = [*key, ts]
    names = metric_names(kind)
    row += [values.get(name) for name in names]
    row += [times.get(name) if name in values else None for name in names]
    return row


def gpu_values(rng: random.Random, limit: float | None, mode: str) -> dict[str, Any]:
    """A GPU's fields; a calm rack's well clear of every threshold, a warm one's at most
    warn (some GPUs 4.5–10 °C from slowdown)."""
    calm = mode in CALM
    values: dict[str, Any] = {}
    if calm or rng.random() < 0.9:
        base = limit if limit is not None else 87.0
        # on the crit and warn thresholds, just inside and past them, or well clear
        offsets = [3.0, 10.0, 2.5, 9.5, 10.5, -4.0, 0.0, 25.0, rng.uniform(-5, 40)]
        offset = rng.uniform(15, 40) if calm else rng.choice(offsets)
        if mode == "warm" and rng.random() < 0.5:
            offset = rng.choice([4.5, 9.5, 10.0])
        values["temp_gpu_c"] = round(base - offset, rng.choice([0, 1, 3]))
    if rng.random() < 0.85:
        top = 200 if calm else 720
        values["power_w"] = round(rng.uniform(50, top), rng.choice([1, 2, 3]))
    if rng.random() < 0.8:
        mask = rng.choice([0, nvml.GPU_IDLE, nvml.SW_POWER_CAP])
        if not calm and rng.random() < 0.4:
            for bit in MASK_BITS:
                if rng.random() < 0.15:
                    mask |= bit
        values["clock_event_reasons"] = mask
    if rng.random() < 0.5:
        values["temp_mem_c"] = round(rng.uniform(60, 75) if calm else rng.uniform(60, 100), 1)
    if rng.random() < 0.4:
        margins = [2.0, 3.0, 10.0, 11.5, rng.uniform(-3, 40)]
        values["temp_margin_c"] = rng.uniform(20, 40) if calm else rng.choice(margins)
    if rng.random() < 0.5:
        values["util_gpu_pct"] = rng.randint(0, 100)  # a field no summary reads
    return values


def limit_sources(rng: random.Random, value: float | None) -> tuple[float | None, float | None]:
    """(entered, reported) whose limit in force is `value`: entered only, reported only, or
    both with the agent reporting another value (the entered one must win on both paths)."""
    if value is None:
        return None, None
    shape = rng.choice(["entered", "reported", "both"])
    if shape == "entered":
        return value, None
    if shape == "reported":
        return None, value
    return value, value + rng.choice([-6.0, 4.0, 30.0])


def build(tdb: TierDb, seed: int) -> None:
    rng = random.Random(seed)
    split_rng = random.Random(-seed)  # its own stream: the states drawn stay as they were
    using = tdb.alias
    site = Site.objects.using(using).create(slug=f"s{seed}", name="Oracle")
    halls = [Hall.objects.using(using).create(site=site, name=n) for n in ("H1", "H2")]
    loops = [
        CoolingLoop.objects.using(using).create(
            site=site, name=f"CDU-{i}", capacity_kw=300, liquid_class="W32", rated_flow_lpm=600
        )
        for i in range(2)
    ]
    gpu_rows, node_rows, rack_rows, loop_rows = [], [], [], []
    node_no = 0
    for r in range(24):
        # "lost": nodes that report while some of their GPUs went silent (off the bus)
        mode = rng.choice(["mixed", "mixed", "calm", "warm", "warm", "quiet", "lost"])
        rack = Rack.objects.using(using).create(
            hall=halls[r % 2],
            name=f"R{r:02d}",
            cooling="liquid" if r % 3 else "air",
            power_budget_kw=rng.choice([20.0, 40.0, 130.0]),
            loop=loops[r % 2] if r % 3 else None,
            position=r,
        )
        if rng.random() < 0.8:
            rack_values: dict[str, Any] = {}
            if rng.random() < 0.5:
                watts = [18_000.0, 36_500.0, 40_000.0, 5_000.0]
                rack_values["power_w"] = 5_000.0 if mode in CALM else rng.choice(watts)
            if rng.random() < 0.6:
                inlets = [22.0, 27.0, 27.5, 32.0, 33.0]
                rack_values["temp_inlet_c"] = 22.0 if mode in CALM else rng.choice(inlets)
            if rng.random() < 0.4:
                rack_values["leak"] = 0 if mode in CALM else rng.choice([0, 0, 1, 2])
            if rng.random() < 0.5:
                rack_values["humidity_pct"] = 40.0
            rack_rows.append(latest_row(rng, "rack", (rack.id,), rack_values, mode))
        for _ in range(rng.choice([0, 1, 2, 3, 4])):
            node_no += 1
            node = Node.objects.using(using).create(name=f"n{seed}-{node_no}", rack=rack)
            calm = mode in CALM  # every GPU known, limited and reporting
            gpus = rng.choice([4, 8] if calm else [0, 1, 4, 8])
            limits: dict[int, float | None] = {}
            inventory = []
            for index in range(gpus):
                shape = rng.uniform(0.2, 1) if mode in CALM else rng.random()
                slowdown = None if shape < 0.15 else rng.choice([87.0, 90.0, 85.5])
                limits[index] = slowdown
                if shape < 0.1:
                    continue  # no inventory row: no limits at all
                gpu = GPU(node=node, index=index)
                in_force = {
                    "slowdown_c": slowdown,
                    "shutdown_c": None if slowdown is None else slowdown + 5,
                    "mem_max_c": rng.choice([None, 95.0, 90.0]),
                    "tlimit_slowdown_c": rng.choice([None, 2.0, 5.0]),
                    "power_limit_max_w": rng.choice([None, 700.0]),
                }
                for name, value in in_force.items():
                    entered, reported = limit_sources(split_rng, value)
                    setattr(gpu, name, entered)
                    setattr(gpu, f"reported_{name}", reported)
                inventory.append(gpu)
            GPU.objects.using(using).bulk_create(inventory)
            extra = 0 if calm else rng.choice([0, 0, 1])  # a GPU the inventory lacks
            for index in range(gpus + extra):
                if not calm and rng.random() < 0.1:
                    continue  # never sent anything
                if mode == "lost":  # its node reports; this GPU may have stopped
                    gpu_mode = "quiet" if rng.random() < 0.4 else "calm"
                    values = gpu_values(rng, limits.get(index), "calm")
                else:
                    gpu_mode, values = mode, gpu_values(rng, limits.get(index), mode)
                gpu_rows.append(latest_row(rng, "gpu", (node.id, index), values, gpu_mode))
            if calm or mode == "lost" or rng.random() < 0.85:
                node_values: dict[str, Any] = {"cpu_pct": 12.0}
                if rng.random() < 0.6:
                    node_values["power_w"] = round(rng.uniform(2000, 9000), 1)
                if rng.random() < 0.6:
                    inlets = [24.0, 27.0, 28.0, 32.5]
                    node_values["temp_inlet_c"] = 24.0 if mode in CALM else rng.choice(inlets)
                node_mode = "calm" if mode == "lost" else mode
                node_rows.append(latest_row(rng, "node", (node.id,), node_values, node_mode))
    for i, loop in enumerate(loops):
        supply = 25.0 if i == 0 else rng.choice([25.0, 31.0, 33.0])
        loop_values = {"supply_c": supply, "flow_lpm": 300.0}
        loop_rows.append(latest_row(rng, "loop", (loop.id,), loop_values, "calm"))
    for kind, rows in (("gpu", gpu_rows), ("node", node_rows), ("rack", rack_rows)):
        tdb.insert(f"fw_{kind}_latest", latest_columns(kind), rows)
    tdb.insert("fw_loop_latest", latest_columns("loop"), loop_rows)


def payloads(states: dict[int, state.RackState]) -> dict[int, dict[str, Any]]:
    return {rack_id: state.rack_payload(s) for rack_id, s in states.items()}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_sql_path_gives_exactly_the_payloads_of_the_python_path(
    tdb: TierDb, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import connections

    build(tdb, seed)
    monkeypatch.setattr(state, "connection", connections[tdb.alias])
    expected = payloads(state.rack_states(None, NOW))
    assert payloads(state.rack_summaries(None, NOW)) == expected
    # The overview counts agents gone quiet from its node summaries, not a read of its own.
    monkeypatch.setattr(site_summary, "connection", connections[tdb.alias])
    # This database enrols no source: every node comes at its kind's default cadence (the
    # ORM read of the tokens would go to the default database, not this one).
    monkeypatch.setattr(site_summary, "node_intervals", dict)
    states = state.rack_summaries(None, NOW)
    newest = [
        (s.info.site_id, node_id, n.ts) for s in states.values() for node_id, n in s.nodes.items()
    ]
    site_ids = sorted({s.info.site_id for s in states.values()})
    counts = site_summary.agent_counts(newest, NOW)
    assert counts == site_summary.agent_freshness(site_ids, NOW)
    assert counts[site_ids[0]]["stale"]
    some = sorted(expected)[::3]
    assert payloads(state.rack_summaries(some, NOW)) == payloads(state.rack_states(some, NOW))
    # The data reaches every level and figure the comparison is about, and limits in
    # force from each source (the inventory's where both exist and differ).
    sources = GPU.objects.using(tdb.alias)
    assert sources.filter(slowdown_c__isnull=True, reported_slowdown_c__isnull=False).exists()
    assert sources.filter(slowdown_c__lt=F("reported_slowdown_c")).exists()
    assert sources.filter(slowdown_c__gt=F("reported_slowdown_c")).exists()
    levels = {p["level"] for p in expected.values()}
    assert levels >= {"crit", "warn", "unknown", "ok"}
    assert any(p["throttling_thermal"] for p in expected.values())
    assert any(p["throttling_power"] for p in expected.values())
    assert any(p["power_source"] == "gpus" for p in expected.values())
    # GPUs lost (node fresh, GPU stale) are counted, and their racks are critical.
    lost = [p for p in expected.values() if p["lost_gpus"]]
    assert lost and all(p["level"] == "crit" for p in lost)


def test_gpu_totals_from_the_database_match_folding_every_gpu(
    tdb: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node by node, not only as rack payloads show them (a figure a rack hides, such as
    a stale node's, must agree too)."""
    from django.db import connections

    build(tdb, 7)
    monkeypatch.setattr(state, "connection", connections[tdb.alias])
    infos = state.rack_infos(None)
    node_ids = [n for info in infos.values() for n in info.nodes]
    readings = state.latest_readings("gpu", node_ids)
    limits = state.gpu_limits(None)
    by_node: dict[int, list[tuple[health.Reading, health.GpuLimits | None]]] = {}
    for key in sorted(readings):
        by_node.setdefault(key[0], []).append((readings[key], limits.get((key[0], key[1]))))
    expected = {n: health.gpu_totals(gpus, NOW) for n, gpus in by_node.items()}
    for now in (NOW, NOW + 20, NOW + 700):
        expected = {n: health.gpu_totals(gpus, now) for n, gpus in by_node.items()}
        assert state.node_gpu_totals(None, now) == expected
        assert state.node_gpu_totals(node_ids[:5], now) == {
            n: t for n, t in expected.items() if n in node_ids[:5]
        }
