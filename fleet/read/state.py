"""The fleet's current state as pages, live pushes, rules and exports see it: the
latest-state tables read once, every figure and level derived by `fleet.health`.

Nothing here computes a threshold of its own; nothing else reads the latest-state
tables for display. `rack_states` is the workhorse (the overview page reads every
rack, the live publisher the racks that changed); `loop_views` does the same for
cooling loops. `fleet.read.payloads` turns these into what pages show per GPU, feed and
loop, and into the live group messages.

The live contract, in short (details in `fleet.read.payloads`):

- `live.rack.<id>`: `{"ts", "rack", "nodes", "gpus", "feeds", "liquid"}`, where
  `gpus` is `{"<GPU inventory pk>": {"node_id", "index", "level", "level_word", "lost"
  (its node reports and it does not: critical), "lost_words", "temp_c", "headroom_c",
  "power_w", "power_limit_w", "power_frac", "sm_clock_mhz" (metric clock_sm_mhz),
  "util_pct" (metric util_gpu_pct), "reasons": [decoded words], "throttling", "stale",
  "stale_s": seconds since its newest sample or null, "ts": that sample (epoch s)}}`;
  `temp_c` is the metric temp_gpu_c, `headroom_c` the headroom to the GPU's own
  slowdown limit. Figures are null when absent or stale.
- `live.site.<id>`: `{"ts", "racks": {"<rack id>": rack_payload}, "loops": {"<loop id>":
  {"level", "level_word", "reasons", "stale", "ts", "supply_c", "supply_limit_c",
  "return_c", "delta_c", "flow_lpm", "flow_frac", "rated_flow_lpm", "supply_kpa",
  "return_kpa", "dp_kpa", "pumps_running", "pumps_failed", "leak", "reservoir_low",
  "heat_removed_kw", "capacity_kw", "reported"}}, "site": facility figures}`.
- a rack payload (`rack_payload`) carries `lost_gpus` (GPUs lost in the rack),
  `lost_words` ("16 GPUs lost", or "") and `lost_level` (critical when any, else ok)
  beside its summary, and the words the overview shows (fleet/words.py): `source_words`,
  `headroom_words`, `throttle_words`, and `modes` (`rack_modes`: per heat-map mode, its
  `level` and `figure`).
- `live.fleet`: compact, `{"ts", "racks": {"<rack id>": {"level", "throttling"}}, "sites"}`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.db import connection

from agents.protocol import reasons as nvml
from fleet import health
from fleet.choices import LiquidClassChoices
from fleet.health.limits import STORED_LIMITS, limits_in_force, reported_column
from fleet.read import summaries_sql
from fleet.storage.latest import merge_columns, rows_to_latest, select_latest_sql
from fleet.storage.schema import ENTITY_COLUMNS, latest_table
from fleet.words import (
    SOURCE_WORDS,
    headroom_words,
    level_word,
    no_data_words,
    say,
    throttling_words,
)

Payload = dict[str, Any]
GpuKey = tuple[int, int]  # (node id, GPU index)
STALE = health.STALE_AFTER_S
REASON_WORDS = {name: meaning for _, name, meaning in nvml.REASONS}


@dataclass
class RackInfo:
    id: int
    name: str
    hall: str
    site_id: int
    budget_kw: float
    cooling: str
    loop_id: int | None
    loop_name: str | None
    nodes: dict[int, str] = field(default_factory=dict)  # id -> name


@dataclass
class RackState:
    info: RackInfo
    summary: health.RackSummary
    nodes: dict[int, health.NodeSummary]
    loop: health.LoopSummary | None
    level: health.Level  # the worst of the rack's own signals and its cooling loop's
    reading: health.Reading = health.EMPTY  # the rack's own sensors (PDU, manifold)
    gpus: dict[GpuKey, tuple[health.Reading, health.GpuLimits | None]] = field(default_factory=dict)


def select_rows(sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, list(params))
        return list(cur.fetchall())


def in_list(ids: Iterable[int]) -> tuple[str, list[int]]:
    values = sorted(set(ids))
    return ", ".join(["%s"] * len(values)) or "NULL", values


def rack_infos(rack_ids: Iterable[int] | None = None) -> dict[int, RackInfo]:
    sql = (
        "SELECT r.id, r.name, h.name, h.site_id, r.power_budget_kw, r.cooling, r.loop_id,"
        " l.name FROM fleet_rack r JOIN fleet_hall h ON h.id = r.hall_id"
        " LEFT JOIN fleet_coolingloop l ON l.id = r.loop_id"
    )
    params: list[int] = []
    if rack_ids is not None:
        marks, params = in_list(rack_ids)
        sql += f" WHERE r.id IN ({marks})"
    sql += " ORDER BY h.name, r.position, r.name"
    racks = {
        row[0]: RackInfo(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7])
        for row in select_rows(sql, params)
    }
    if racks:
        marks, params = in_list(racks)
        for node_id, name, rack_id in select_rows(
            f"SELECT id, name, rack_id FROM fleet_node WHERE rack_id IN ({marks}) ORDER BY name",
            params,
        ):
            racks[rack_id].nodes[node_id] = name
    return racks


def _readings(kind: str, column: str, ids: Iterable[int]) -> dict[tuple[int, ...], Any]:
    marks, params = in_list(ids)
    if not params:
        return {}
    records = select_rows(select_latest_sql(kind, f"{column} IN ({marks})"), params)
    return {
        key: health.Reading(row.values, row.ts, row.newest)
        for key, row in rows_to_latest(kind, records).items()
    }


def latest_readings(kind: str, ids: Iterable[int]) -> dict[tuple[int, ...], health.Reading]:
    """The latest reading of each entity of `kind` whose first key is in `ids` (GPUs: by
    node id), for pages that show figures the summaries do not carry (a feed's power, a
    loop's pressure and heat removed, a rack's liquid supply)."""
    return _readings(kind, ENTITY_COLUMNS[kind][0], ids)


def gpu_limits(node_ids: Iterable[int] | None) -> dict[tuple[int, int], health.GpuLimits]:
    """Each GPU's limits in force (entered, else reported: `fleet.health.limits`), for the
    given nodes (every GPU when None: one plain scan, cheaper than a 1,000-value IN list
    when the caller wants the whole fleet)."""
    entered = ", ".join(STORED_LIMITS)
    reported = ", ".join(reported_column(name) for name in STORED_LIMITS)
    sql = f'SELECT node_id, "index", {entered}, {reported} FROM fleet_gpu'
    if node_ids is None:
        rows = select_rows(sql, [])
    else:
        marks, params = in_list(node_ids)
        if not params:
            return {}
        rows = select_rows(f"{sql} WHERE node_id IN ({marks})", params)
    # GPUs of one model report the same limits: each distinct row of values is judged once
    # and its (frozen) GpuLimits shared; the rule engine reads every GPU's each pass.
    in_force: dict[tuple[Any, ...], health.GpuLimits] = {}
    out: dict[tuple[int, int], health.GpuLimits] = {}
    for r in rows:
        values = tuple(r[2:])
        limits = in_force.get(values)
        if limits is None:
            limits = in_force[values] = _limits_in_force(values)
        out[(r[0], r[1])] = limits
    return out


def _limits_in_force(values: tuple[Any, ...]) -> health.GpuLimits:
    """(the entered limits…, the reported limits…) in STORED_LIMITS order, judged."""
    n = len(STORED_LIMITS)
    return limits_in_force(
        health.GpuLimits(**dict(zip(STORED_LIMITS, values[:n], strict=True))),
        health.GpuLimits(**dict(zip(STORED_LIMITS, values[n:], strict=True))),
    )


def gpu_ids(node_ids: Iterable[int]) -> dict[GpuKey, int]:
    """The inventory pk of each GPU of the given nodes, by (node id, index)."""
    marks, params = in_list(node_ids)
    if not params:
        return {}
    sql = f'SELECT node_id, "index", id FROM fleet_gpu WHERE node_id IN ({marks})'
    return {(node, index): pk for node, index, pk in select_rows(sql, params)}


@dataclass
class LoopState:
    """A loop's summary with the reading and ratings behind it (pressure, pumps running,
    heat removed and reservoir are figures the summary does not carry)."""

    id: int
    site_id: int
    name: str
    supply_limit_c: float | None
    rated_flow_lpm: float | None
    capacity_kw: float | None
    reading: health.Reading
    summary: health.LoopSummary


def loop_views(loop_ids: Iterable[int], now: float) -> dict[int, LoopState]:
    marks, params = in_list(loop_ids)
    if not params:
        return {}
    rows = select_rows(
        "SELECT id, site_id, name, supply_limit_c, liquid_class, rated_flow_lpm, capacity_kw"
        f" FROM fleet_coolingloop WHERE id IN ({marks})",
        params,
    )
    readings = _readings("loop", "loop_id", [row[0] for row in rows])
    out: dict[int, LoopState] = {}
    for lid, site_id, name, limit, cls, flow, capacity in rows:
        limit = limit if limit is not None else LiquidClassChoices.supply_limit_c(cls)
        reading = readings.get((lid,), health.EMPTY)
        summary = health.loop_summary(reading, now, supply_limit_c=limit, rated_flow_lpm=flow)
        out[lid] = LoopState(lid, site_id, name, limit, flow, capacity, reading, summary)
    return out


def loop_states(loop_ids: Iterable[int], now: float) -> dict[int, health.LoopSummary]:
    return {lid: view.summary for lid, view in loop_views(loop_ids, now).items()}


@dataclass
class Preread:
    """Latest state a caller has already read (the alert engine's snapshot), so
    `rack_states` does not read it a second time."""

    gpus: Mapping[tuple[int, ...], health.Reading]
    nodes: Mapping[tuple[int, ...], health.Reading]
    racks: Mapping[tuple[int, ...], health.Reading]
    limits: Mapping[tuple[int, int], health.GpuLimits]


def rack_states(
    rack_ids: Iterable[int] | None, now: float, preread: Preread | None = None
) -> dict[int, RackState]:
    """Every figure of the given racks (all racks when None), from the latest state."""
    infos = rack_infos(rack_ids)
    node_ids = [n for info in infos.values() for n in info.nodes]
    if preread is None:
        preread = Preread(
            _readings("gpu", "node_id", node_ids),
            _readings("node", "node_id", node_ids),
            _readings("rack", "rack_id", infos),
            gpu_limits(node_ids),
        )
    gpus, nodes, racks, limits = preread.gpus, preread.nodes, preread.racks, preread.limits
    loops = loop_states({i.loop_id for i in infos.values() if i.loop_id is not None}, now)
    per_node: dict[int, dict[GpuKey, tuple[health.Reading, health.GpuLimits | None]]] = {}
    for key in sorted(gpus):
        gpu_key = (key[0], key[1])
        per_node.setdefault(key[0], {})[gpu_key] = (gpus[key], limits.get(gpu_key))
    out: dict[int, RackState] = {}
    for rack_id, info in infos.items():
        summaries = {
            node_id: health.node_summary(
                per_node.get(node_id, {}).values(), nodes.get((node_id,)), now
            )
            for node_id in info.nodes
        }
        reading = racks.get((rack_id,)) or health.EMPTY
        summary = health.rack_summary(reading, list(summaries.values()), info.budget_kw, now)
        loop = loops.get(info.loop_id) if info.loop_id is not None else None
        level = summary.level if loop is None else health.worst(summary.level, loop.level)
        rack_gpus = {k: v for n in info.nodes for k, v in per_node.get(n, {}).items()}
        out[rack_id] = RackState(info, summary, summaries, loop, level, reading, rack_gpus)
    return out


# The fields `health.node_summary` and `health.rack_summary` read of a node and a rack.
SUMMARY_FIELDS = {"node": ("power_w", "temp_inlet_c"), "rack": ("power_w", "temp_inlet_c", "leak")}


def summary_readings(
    kind: str, column: str, ids: Iterable[int], fields: tuple[str, ...] | None = None
) -> dict[tuple[int, ...], Any]:
    """Latest readings holding only the fields the summaries judge (`SUMMARY_FIELDS`, or
    `fields`) and the row's newest sample time, which is all `health.stale` and
    `newest_ts` look at."""
    marks, params = in_list(ids)
    if not params:
        return {}
    names = SUMMARY_FIELDS[kind] if fields is None else fields
    columns = merge_columns(kind, names)  # keys, ts, the fields, their sample times
    records = select_rows(
        f"SELECT {', '.join(columns)} FROM {latest_table(kind)} WHERE {column} IN ({marks})",
        params,
    )
    nkey, n = len(ENTITY_COLUMNS[kind]), len(names)
    out: dict[tuple[int, ...], health.Reading] = {}
    for rec in records:
        values: dict[str, Any] = {}
        times: dict[str, float] = {}
        for i, name in enumerate(names):
            value = rec[nkey + 1 + i]
            if value is not None:  # as `rows_to_latest`: absent = unsupported or never seen
                values[name] = value
                times[name] = rec[nkey + 1 + n + i]
        out[tuple(rec[:nkey])] = health.Reading(values, times, rec[nkey])
    return out


def node_gpu_totals(node_ids: Iterable[int] | None, now: float) -> dict[int, health.GpuTotals]:
    """Each node's GPUs folded in the database (`fleet.read.summaries_sql`): what
    `health.node_summary` needs of them, without reading every GPU's figures."""
    where, params = "", list[int]()
    if node_ids is not None:
        marks, params = in_list(node_ids)
        where = f"l.node_id IN ({marks})"
    vendor = connection.vendor
    rows = select_rows(
        summaries_sql.totals_sql(where, vendor),
        [*summaries_sql.totals_params(now, STALE), *params],
    )
    if vendor == "postgresql":  # the rows carry each node's power
        return summaries_sql.totals_from_rows(rows)
    power = select_rows(
        summaries_sql.power_sql(where), [*summaries_sql.power_params(now, STALE), *params]
    )
    return summaries_sql.totals_from_rows(rows, power)


def rack_summaries(rack_ids: Iterable[int] | None, now: float) -> dict[int, RackState]:
    """`rack_states` for pages that show racks and nodes, never single GPUs (the fleet
    overview): the same summaries, loops and levels, so the same `rack_payload`, with each
    node's GPUs folded in the database. Its states carry no GPUs (`gpus` is empty) and
    their `reading` only the rack fields the summary judges."""
    infos = rack_infos(rack_ids)
    node_ids = [n for info in infos.values() for n in info.nodes]
    # Every GPU row in one scan when all racks are wanted (cheaper than a long IN list).
    totals = node_gpu_totals(None if rack_ids is None else node_ids, now)
    nodes = summary_readings("node", "node_id", node_ids)
    racks = summary_readings("rack", "rack_id", infos)
    loops = loop_states({i.loop_id for i in infos.values() if i.loop_id is not None}, now)
    no_gpus = health.gpu_totals((), now)
    out: dict[int, RackState] = {}
    for rack_id, info in infos.items():
        summaries = {
            node_id: health.node_summary_of(
                totals.get(node_id, no_gpus), nodes.get((node_id,)), now, STALE
            )
            for node_id in info.nodes
        }
        reading = racks.get((rack_id,)) or health.EMPTY
        summary = health.rack_summary(reading, list(summaries.values()), info.budget_kw, now)
        loop = loops.get(info.loop_id) if info.loop_id is not None else None
        level = summary.level if loop is None else health.worst(summary.level, loop.level)
        out[rack_id] = RackState(info, summary, summaries, loop, level, reading)
    return out


def plain(value: Any) -> Any:
    """Dataclasses and levels as JSON-ready dicts and strings (for the channel layer)."""
    return orjson.loads(orjson.dumps(value))


def rack_payload(state: RackState) -> Payload:
    """A rack as the overview shows it: its summary, each level, and the words for them
    (`modes`: per heat-map mode, the level it colours the tile with and the figure behind
    it), so the page's script renders and never judges."""
    info, summary = state.info, state.summary
    lost = lost_gpus(state)
    data: Payload = {
        **plain(summary),  # first: the keys below (its `level` among them) take precedence
        "id": info.id,
        "name": info.name,
        "budget_kw": info.budget_kw,
        "loop": info.loop_name,
        "loop_level": None if state.loop is None else state.loop.level.value,
        "level": state.level.value,  # the rack's own signals and its loop's
        "headroom_level": health.headroom_level(summary.min_headroom_c).value,
        "throttling_level": health.throttling_level(summary.throttling_thermal).value,
        "lost_gpus": lost,
        "lost_words": health.gpus_lost_words(lost) if lost else "",
        "lost_level": (health.LOST_LEVEL if lost else health.Level.OK).value,
        "reasons": rack_reasons(state),
        "source_words": SOURCE_WORDS.get(summary.power_source, ""),
        # Lost GPUs (off the bus while their node reports) are not "headroom unknown".
        "headroom_words": health.gpus_lost_words(lost)
        if summary.min_headroom_c is None and lost
        else headroom_words(summary.min_headroom_c),
        "throttle_words": rack_throttle_words(summary),
    }
    data["modes"] = rack_modes(data)
    return data


def rack_throttle_words(s: health.RackSummary) -> str:
    parts = []
    if s.throttling_thermal:
        parts.append(say("gpus_thermal", n=s.throttling_thermal))
    if s.throttling_power:
        parts.append(say("at_power_limit", n=s.throttling_power))
    return " · ".join(parts)


def rack_modes(r: Payload) -> dict[str, Payload]:
    """Per heat-map mode (but alerts, which the site payload carries): the level that
    colours the tile and the figure behind it."""
    if r["power_kw"] is None:
        power = {"level": health.Level.UNKNOWN.value, "figure": "no power data"}
    else:
        pct = "" if r["power_pct"] is None else f" ({r['power_pct']:.0f} % of budget)"
        figure = f"{r['power_kw']:.1f} of {r['budget_kw']:g} kW{pct}"
        power = {"level": r["power_level"], "figure": figure}
    if r["min_headroom_c"] is None and r["lost_gpus"]:
        head = {"level": r["lost_level"], "figure": r["lost_words"]}
    elif r["min_headroom_c"] is None:
        head = {"level": health.Level.UNKNOWN.value, "figure": "no GPU temperature"}
    else:
        head = {"level": r["headroom_level"], "figure": f"hottest GPU {r['headroom_words']}"}
    throttling = throttling_words(r["throttling_thermal"], r["throttling_power"])
    return {
        "overall": {"level": r["level"], "figure": overall_figure(r)},
        "power": power,
        "headroom": head,
        "throttling": {"level": r["throttling_level"], "figure": throttling},
    }


def overall_figure(rack: Payload) -> str:
    """The reasons for the rack's level; a loop that went quiet is not among them, though
    it makes the rack's level "no data", so it is said here."""
    if rack["reasons"]:
        return " · ".join(rack["reasons"])
    if rack.get("loop_level") == health.Level.UNKNOWN:
        return f"no fresh data from its cooling loop {rack['loop']}"
    return "every signal OK" if rack["level"] == health.Level.OK else ""


def lost_gpus(state: RackState) -> int:
    """GPUs of the rack whose node reports and which do not (`health.lost`)."""
    return sum(n.lost_gpus for n in state.nodes.values())


def rack_reasons(state: RackState) -> list[str]:
    """Why a rack is not OK, in an operator's words (the tile and alerts show them)."""
    s = state.summary
    out: list[str] = []
    lost = lost_gpus(state)
    if lost:  # the worst hardware state in the building: said first
        out.append(health.gpus_lost_words(lost))
    if s.power_level in (health.Level.WARN, health.Level.CRIT) and s.power_pct is not None:
        out.append(f"power {s.power_pct:.0f} % of budget")
    if s.throttling_thermal:
        out.append(say("gpus_thermal", n=s.throttling_thermal))
    head = health.headroom_level(s.min_headroom_c)
    if head in (health.Level.WARN, health.Level.CRIT) and s.min_headroom_c is not None:
        out.append(f"a GPU {headroom_words(s.min_headroom_c)}")
    if s.inlet_c is not None and health.inlet_level(s.inlet_c) != health.Level.OK:
        out.append(f"inlet air {s.inlet_c:.1f} °C")
    if s.leak:
        out.append("leak detected")
    if state.loop is not None and state.loop.level in (health.Level.WARN, health.Level.CRIT):
        out.append(f"cooling loop {state.info.loop_name} {state.loop.level.value}")
    if s.stale:
        out.append("no fresh data")
    return out


def throttle_words(throttle: health.Throttle) -> list[str]:
    """Each clock-event reason set, as NVML names it and what it means."""
    return [f"{name}: {REASON_WORDS.get(name, 'unknown reason bit')}" for name in throttle.reasons]


def fresh_value(reading: health.Reading, name: str, now: float) -> float | None:
    value = reading.fresh(name, now, STALE)
    return None if value is None else float(value)


def loop_reasons(view: LoopState, now: float) -> list[str]:
    """Why a loop is not OK, one phrase per judged figure that is not OK (named the way
    `health.loop_summary` judges it, so the words never disagree with the level)."""
    s, reading = view.summary, view.reading
    if s.stale:
        return [no_data_words(s.ts, now)]
    out: list[str] = []
    limit = view.supply_limit_c
    supply = s.supply_c
    if supply is not None and limit is not None and health.supply_level(supply, limit) != "ok":
        out.append(f"supply {supply:.1f} °C against its {limit:.0f} °C limit")
    if s.flow_lpm is not None and health.flow_level(s.flow_lpm, view.rated_flow_lpm) != "ok":
        of_rated = "" if s.flow_frac is None else f" ({100 * s.flow_frac:.0f} % of rated)"
        out.append(f"flow {s.flow_lpm:.0f} L/min{of_rated}")
    if s.pumps_failed:
        out.append(f"{s.pumps_failed} pump(s) failed")
    running = fresh_value(reading, "pumps_running", now)
    if running is not None and running <= 0:
        out.append("no pump running")
    if s.leak:
        out.append(f"leak detected ({level_word(health.leak_level(s.leak))})")
    if fresh_value(reading, "reservoir_low", now):
        out.append("reservoir low")
    return out
