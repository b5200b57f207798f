"""The fleet's current state as pages, live pushes, rules and exports see it: the
latest-state tables read once, every figure and level derived by `fleet.health`.

Nothing here computes a threshold of its own; nothing else reads the latest-state
tables for display. `rack_states` is the workhorse (the overview page reads every
rack, the live publisher the racks that changed); `plan_updates` and `build_updates`
turn the entities an ingest child saved into the group payloads `fleet.live` sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.db import connection

from fleet import health
from fleet.choices import LiquidClassChoices
from fleet.live import fleet_group, rack_group, site_group
from fleet.site_summary import site_payload
from fleet.storage.latest import rows_to_latest, select_latest_sql
from fleet.storage.schema import ENTITY_COLUMNS

Payload = dict[str, Any]


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


def _select(sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, list(params))
        return list(cur.fetchall())


def _in(ids: Iterable[int]) -> tuple[str, list[int]]:
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
        marks, params = _in(rack_ids)
        sql += f" WHERE r.id IN ({marks})"
    sql += " ORDER BY h.name, r.position, r.name"
    racks = {
        row[0]: RackInfo(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7])
        for row in _select(sql, params)
    }
    if racks:
        marks, params = _in(racks)
        for node_id, name, rack_id in _select(
            f"SELECT id, name, rack_id FROM fleet_node WHERE rack_id IN ({marks}) ORDER BY name",
            params,
        ):
            racks[rack_id].nodes[node_id] = name
    return racks


def _readings(kind: str, column: str, ids: Iterable[int]) -> dict[tuple[int, ...], Any]:
    marks, params = _in(ids)
    if not params:
        return {}
    records = _select(select_latest_sql(kind, f"{column} IN ({marks})"), params)
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
    """Each GPU's own limits, for the given nodes (every GPU when None: one plain scan,
    cheaper than a 1,000-value IN list when the caller wants the whole fleet)."""
    sql = (
        'SELECT node_id, "index", slowdown_c, shutdown_c, gpu_max_c, mem_max_c,'
        " tlimit_slowdown_c, power_limit_max_w FROM fleet_gpu"
    )
    if node_ids is None:
        rows = _select(sql, [])
    else:
        marks, params = _in(node_ids)
        if not params:
            return {}
        rows = _select(f"{sql} WHERE node_id IN ({marks})", params)
    return {
        (r[0], r[1]): health.GpuLimits(
            slowdown_c=r[2],
            shutdown_c=r[3],
            gpu_max_c=r[4],
            mem_max_c=r[5],
            tlimit_slowdown_c=r[6],
            power_limit_max_w=r[7],
        )
        for r in rows
    }


def loop_states(loop_ids: Iterable[int], now: float) -> dict[int, health.LoopSummary]:
    marks, params = _in(loop_ids)
    if not params:
        return {}
    ratings = {
        lid: (limit if limit is not None else LiquidClassChoices.supply_limit_c(cls), flow)
        for lid, limit, cls, flow in _select(
            "SELECT id, supply_limit_c, liquid_class, rated_flow_lpm FROM fleet_coolingloop"
            f" WHERE id IN ({marks})",
            params,
        )
    }
    readings = _readings("loop", "loop_id", ratings)
    out: dict[int, health.LoopSummary] = {}
    for lid, (limit, flow) in ratings.items():
        reading = readings.get((lid,), health.EMPTY)
        out[lid] = health.loop_summary(reading, now, supply_limit_c=limit, rated_flow_lpm=flow)
    return out


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
    per_node: dict[int, list[tuple[health.Reading, health.GpuLimits | None]]] = {}
    for key in sorted(gpus):
        per_node.setdefault(key[0], []).append((gpus[key], limits.get((key[0], key[1]))))
    out: dict[int, RackState] = {}
    for rack_id, info in infos.items():
        summaries = {
            node_id: health.node_summary(per_node.get(node_id, []), nodes.get((node_id,)), now)
            for node_id in info.nodes
        }
        summary = health.rack_summary(
            racks.get((rack_id,)), list(summaries.values()), info.budget_kw, now
        )
        loop = loops.get(info.loop_id) if info.loop_id is not None else None
        level = summary.level if loop is None else health.worst(summary.level, loop.level)
        out[rack_id] = RackState(info, summary, summaries, loop, level)
    return out


def plain(value: Any) -> Any:
    """Dataclasses and levels as JSON-ready dicts and strings (for the channel layer)."""
    return orjson.loads(orjson.dumps(value))


def rack_payload(state: RackState) -> Payload:
    info, summary = state.info, state.summary
    return {
        **plain(summary),  # first: the keys below (its `level` among them) take precedence
        "id": info.id,
        "name": info.name,
        "budget_kw": info.budget_kw,
        "loop": info.loop_name,
        "loop_level": None if state.loop is None else state.loop.level.value,
        "level": state.level.value,  # the rack's own signals and its loop's
        "headroom_level": health.headroom_level(summary.min_headroom_c).value,
        "reasons": rack_reasons(state),
    }


def rack_reasons(state: RackState) -> list[str]:
    """Why a rack is not OK, in an operator's words (the tile and alerts show them)."""
    s = state.summary
    out: list[str] = []
    if s.power_level in (health.Level.WARN, health.Level.CRIT) and s.power_pct is not None:
        out.append(f"power {s.power_pct:.0f} % of budget")
    if s.throttling_thermal:
        out.append(f"{s.throttling_thermal} GPU(s) in thermal slowdown")
    head = health.headroom_level(s.min_headroom_c)
    if head in (health.Level.WARN, health.Level.CRIT) and s.min_headroom_c is not None:
        out.append(_headroom_words(s.min_headroom_c, "a GPU "))
    if s.inlet_c is not None and health.inlet_level(s.inlet_c) != health.Level.OK:
        out.append(f"inlet air {s.inlet_c:.1f} °C")
    if s.leak:
        out.append("leak detected")
    if state.loop is not None and state.loop.level in (health.Level.WARN, health.Level.CRIT):
        out.append(f"cooling loop {state.info.loop_name} {state.loop.level.value}")
    if s.stale:
        out.append("no fresh data")
    return out


def _headroom_words(headroom_c: float, prefix: str = "") -> str:
    if headroom_c < 0:
        return f"{prefix}{-headroom_c:.0f} °C past its slowdown limit"
    return f"{prefix}{headroom_c:.0f} °C from slowdown"


@dataclass
class UpdatePlan:
    """What changed, resolved to the racks (with their sites) and sites it touches."""

    racks: dict[int, int]  # rack id -> site id
    facility_sites: set[int]

    def groups(self) -> set[str]:
        out = {rack_group(r) for r in self.racks} | {site_group(s) for s in self.racks.values()}
        out |= {site_group(s) for s in self.facility_sites}
        return out | {fleet_group()} if out else out


def plan_updates(changed: dict[str, set[tuple[int, ...]]]) -> UpdatePlan:
    rack_ids = _racks_touched(changed)
    racks: dict[int, int] = {}
    if rack_ids:
        marks, params = _in(rack_ids)
        racks = dict(
            _select(
                "SELECT r.id, h.site_id FROM fleet_rack r JOIN fleet_hall h ON h.id = r.hall_id"
                f" WHERE r.id IN ({marks})",
                params,
            )
        )
    return UpdatePlan(racks, {key[0] for key in changed.get("facility", ())})


def build_updates(plan: UpdatePlan, wanted: set[str], now: float) -> list[tuple[str, Payload]]:
    """The group messages for what changed, only for groups someone watches: each rack
    (its summary), each site (its racks, its facility figures), the fleet summary."""
    fleet_wanted = fleet_group() in wanted
    needed = [
        rack_id
        for rack_id, site_id in plan.racks.items()
        if fleet_wanted or rack_group(rack_id) in wanted or site_group(site_id) in wanted
    ]
    states = rack_states(needed, now) if needed else {}
    by_site: dict[int, Payload] = {}
    out: list[tuple[str, Payload]] = []
    for rack_id, state in states.items():
        payload = rack_payload(state)
        if rack_group(rack_id) in wanted:
            # The rack page renders itself again from the latest state on this signal
            # (dashboard/live_pages.py), so the message carries the rack's summary only.
            out.append((rack_group(rack_id), {"ts": now, "rack": payload}))
        site = by_site.setdefault(state.info.site_id, {"ts": now, "racks": {}})
        site["racks"][str(rack_id)] = payload
    for site_id in plan.facility_sites:
        site = by_site.setdefault(site_id, {"ts": now, "racks": {}})
        site["site"] = site_payload(site_id, now)
    fleet: Payload = {"ts": now, "racks": {}, "sites": {}}
    for site_id, site in by_site.items():
        if site_group(site_id) in wanted:
            out.append((site_group(site_id), site))
        for rack_id, rack in site["racks"].items():
            fleet["racks"][rack_id] = {
                "level": rack["level"],
                "throttling": rack["throttling_thermal"] + rack["throttling_power"],
            }
        if "site" in site:
            fleet["sites"][str(site_id)] = site["site"]
    if fleet_wanted and by_site:
        out.append((fleet_group(), fleet))
    return out


def _racks_touched(changed: dict[str, set[tuple[int, ...]]]) -> set[int]:
    """The racks whose state an entity change can move: their nodes, feeds and loops."""
    racks = {key[0] for key in changed.get("rack", ())}
    lookups = (
        ({key[0] for kind in ("gpu", "node") for key in changed.get(kind, ())}, _NODE_RACKS),
        ({key[0] for key in changed.get("feed", ())}, _FEED_RACKS),
        ({key[0] for key in changed.get("loop", ())}, _LOOP_RACKS),
    )
    for ids, sql in lookups:
        if ids:
            marks, params = _in(ids)
            racks |= {r for (r,) in _select(sql.format(marks), params)}
    return racks


_NODE_RACKS = "SELECT rack_id FROM fleet_node WHERE id IN ({})"
_FEED_RACKS = "SELECT rack_id FROM fleet_powerfeed WHERE id IN ({})"
_LOOP_RACKS = "SELECT id FROM fleet_rack WHERE loop_id IN ({})"
