"""What pages and live pushes show of each entity beyond the rack summary — each GPU, feed,
a rack's liquid and each cooling loop — and the live group messages built from them.

`plan_updates` resolves what an ingest child saved to the racks, loops and sites it
touches; `build_updates` builds only the messages of watched groups (`fleet.read.live`):

- `live.rack.<id>`: `{"ts", "rack": rack_payload, "nodes": {"<node id>": NodeSummary},
  "gpus": {"<GPU inventory pk>": gpu_entry}, "feeds": {"<feed id>": feed_entry},
  "liquid": liquid_entry or null}`.
- `live.rack.<id>.changed`: `{"ts"}`, a signal for a page the server renders again itself
  (the rack page): it costs no figures.
- `live.site.<id>`: `{"ts", "racks": {"<rack id>": rack_payload}, "loops": {"<loop id>":
  loop_payload}, "site": site_payload}`; only what changed is in it ("loops" and "site"
  only when a loop or the facility reported).
- `live.fleet`: compact: `{"ts", "racks": {"<rack id>": {"level", "throttling"}},
  "sites": {"<site id>": site_payload}}`.

Every figure is derived by `fleet.health` (through `fleet.read.state`) and is null when absent
or older than `health.STALE_AFTER_S`; `ts` fields are epoch seconds of the newest sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fleet import health
from fleet.read.live import fleet_group, rack_changed_group, rack_group, site_group
from fleet.read.site_summary import site_payload
from fleet.read.state import (
    GpuKey,
    LoopState,
    Payload,
    RackState,
    fresh_value,
    gpu_ids,
    in_list,
    latest_readings,
    loop_reasons,
    loop_views,
    plain,
    rack_payload,
    rack_states,
    select_rows,
    throttle_words,
)
from fleet.words import level_word

__all__ = (
    "UpdatePlan",
    "build_updates",
    "feed_entry",
    "gpu_entry",
    "liquid_entry",
    "loop_payload",
    "plan_updates",
    "rack_feeds",
    "rack_gpus",
)


def gpu_entry(
    node_id: int,
    index: int,
    reading: health.Reading,
    limits: health.GpuLimits | None,
    now: float,
    *,
    node_reports: bool,
) -> Payload:
    """One GPU as the rack and GPU pages show it (the contract of `gpus` in a rack message):

    `node_id`, `index`; `level` (ok/warn/crit/unknown) and `level_word` (OK/Warning/
    Critical/No data); `lost`: its node reports (`node_reports`: the node or another of
    its GPUs is fresh) and it has nothing fresh — then its level is `health.LOST_LEVEL`
    (critical), never "no data", and `lost_words` says so ("lost: off the bus");
    `temp_c` (temp_gpu_c); `headroom_c` to the GPU's own slowdown limit; `power_w` and
    `power_limit_w` (the enforced cap, else the board's maximum) with `power_frac` of
    it; `sm_clock_mhz` (clock_sm_mhz); `util_pct` (util_gpu_pct); `reasons` (decoded
    clock-event reasons, "hw_thermal: hardware thermal slowdown (>=2x)"); `throttling`
    (thermal or power); `stale` (nothing fresh); `stale_s` (seconds since its newest
    sample, null when it never reported); `ts` (that sample, epoch s). Every figure is
    null when absent or older than `health.STALE_AFTER_S`.
    """
    s = health.gpu_summary(reading, limits, now)
    lost = health.gpu_lost_on(reading, node_reports, now)
    level = health.LOST_LEVEL if lost else s.level
    cap = fresh_value(reading, "power_limit_w", now)
    if cap is None and limits is not None:
        cap = limits.power_limit_max_w
    return {
        "node_id": node_id,
        "index": index,
        "level": level.value,
        "level_word": level_word(level),
        "lost": lost,
        "lost_words": f"{health.LOST}: {health.OFF_THE_BUS}" if lost else "",
        "temp_c": s.temp_c,
        "headroom_c": None if s.stale else s.headroom.slowdown_c,
        "power_w": s.power_w,
        "power_limit_w": cap,
        "power_frac": s.power_frac,
        "sm_clock_mhz": fresh_value(reading, "clock_sm_mhz", now),
        "util_pct": fresh_value(reading, "util_gpu_pct", now),
        "reasons": throttle_words(s.throttle),
        "throttling": s.throttle.throttling,
        "stale": s.stale,
        "stale_s": None if s.ts is None else round(max(0.0, now - s.ts), 1),
        "ts": s.ts,
    }


def rack_gpus(state: RackState, ids: Mapping[GpuKey, int], now: float) -> dict[str, Payload]:
    """Every inventory GPU of the rack (`ids` from `gpu_ids`), keyed by its pk."""
    reporting = {node_id: not n.stale for node_id, n in state.nodes.items()}
    return {
        str(pk): gpu_entry(
            key[0],
            key[1],
            *state.gpus.get(key, (health.EMPTY, None)),
            now,
            node_reports=reporting.get(key[0], False),
        )
        for key, pk in sorted(ids.items())
    }


def feed_entry(reading: health.Reading, available_kw: float, now: float) -> Payload:
    return {
        "power_w": fresh_value(reading, "power_w", now),
        "load_frac": health.feed_load_fraction(reading, available_kw, now),
        "ts": health.newest_ts(reading),
    }


def rack_feeds(rack_ids: Iterable[int], now: float) -> dict[int, dict[str, Payload]]:
    """Each rack's feeds: power and load against its rating, keyed by feed id."""
    from fleet.models import PowerFeed  # rating is a model property (V × A × %, √3)

    feeds = list(PowerFeed.objects.filter(rack_id__in=list(rack_ids)))
    readings = latest_readings("feed", [f.id for f in feeds])
    out: dict[int, dict[str, Payload]] = {}
    for f in feeds:
        reading = readings.get((f.id,), health.EMPTY)
        out.setdefault(f.rack_id, {})[str(f.id)] = feed_entry(reading, f.available_kw, now)
    return out


def liquid_entry(state: RackState, now: float) -> Payload | None:
    """A liquid rack's supply, return and flow: its own manifold sensors where it has them
    (`*_from`: "rack"), else its loop's ("loop"); None for a rack on no loop."""
    if state.info.loop_id is None:
        return None
    loop = state.loop
    level = health.Level.UNKNOWN if loop is None else loop.level
    out: Payload = {
        "loop_id": state.info.loop_id,
        "loop_name": state.info.loop_name,
        "loop_level": level.value,
        "loop_level_word": level_word(level),
        "ts": None if loop is None else loop.ts,
    }
    for key, rack_metric, loop_value in (
        ("supply_c", "liquid_supply_c", None if loop is None else loop.supply_c),
        ("return_c", "liquid_return_c", None if loop is None else loop.return_c),
        ("flow_lpm", "liquid_flow_lpm", None if loop is None else loop.flow_lpm),
    ):
        own = fresh_value(state.reading, rack_metric, now)
        out[key] = own if own is not None else loop_value
        out[key.rsplit("_", 1)[0] + "_from"] = (
            "rack" if own is not None else "loop" if loop_value is not None else None
        )
    return out


LOOP_FIGURES = ("supply_kpa", "return_kpa", "dp_kpa", "pumps_running", "heat_removed_kw")


def loop_payload(view: LoopState, now: float) -> Payload:
    """One loop for the cooling page (the contract of `loops` in a site message): `id`,
    `name`, `level`, `level_word`, `reasons`, `stale`, `ts` (newest sample); fresh
    figures or null: `supply_c` (against `supply_limit_c`), `return_c`, `delta_c`,
    `flow_lpm` (`flow_frac` of `rated_flow_lpm`), `supply_kpa`, `return_kpa`, `dp_kpa`,
    `pumps_running`, `pumps_failed`, `leak` (0/1/2), `reservoir_low`, `heat_removed_kw`
    (against `capacity_kw`); `reported`: each metric the CDU ever sent and when, so a
    missing figure reads "not reported" or "no data for N s"."""
    s = view.summary
    return {
        "id": view.id,
        "name": view.name,
        "site_id": view.site_id,
        "level": s.level.value,
        "level_word": level_word(s.level),
        "reasons": loop_reasons(view, now),
        "stale": s.stale,
        "ts": s.ts,
        "supply_c": s.supply_c,
        "supply_limit_c": view.supply_limit_c,
        "return_c": s.return_c,
        "delta_c": s.delta_c,
        "flow_lpm": s.flow_lpm,
        "flow_frac": s.flow_frac,
        "rated_flow_lpm": view.rated_flow_lpm,
        "pumps_failed": s.pumps_failed,
        "leak": s.leak,
        "reservoir_low": fresh_value(view.reading, "reservoir_low", now),
        "capacity_kw": view.capacity_kw,
        **{name: fresh_value(view.reading, name, now) for name in LOOP_FIGURES},
        "reported": {n: t for n, t in view.reading.ts.items() if n in view.reading.values},
    }


@dataclass
class UpdatePlan:
    """What changed, resolved to the racks and loops (with their sites) and sites it
    touches."""

    racks: dict[int, int]  # rack id -> site id
    facility_sites: set[int]
    loops: dict[int, int] = field(default_factory=dict)  # loop id -> site id

    def groups(self) -> set[str]:
        out = {rack_group(r) for r in self.racks} | {site_group(s) for s in self.racks.values()}
        out |= {rack_changed_group(r) for r in self.racks}
        out |= {site_group(s) for s in (*self.facility_sites, *self.loops.values())}
        return out | {fleet_group()} if out else out


def plan_updates(changed: dict[str, set[tuple[int, ...]]]) -> UpdatePlan:
    rack_ids = _racks_touched(changed)
    racks: dict[int, int] = {}
    if rack_ids:
        marks, params = in_list(rack_ids)
        racks = dict(
            select_rows(
                "SELECT r.id, h.site_id FROM fleet_rack r JOIN fleet_hall h ON h.id = r.hall_id"
                f" WHERE r.id IN ({marks})",
                params,
            )
        )
    loops: dict[int, int] = {}
    loop_ids = {key[0] for key in changed.get("loop", ())}
    if loop_ids:  # a loop reaches its site even when it serves no rack
        marks, params = in_list(loop_ids)
        loops = dict(
            select_rows(f"SELECT id, site_id FROM fleet_coolingloop WHERE id IN ({marks})", params)
        )
    return UpdatePlan(racks, {key[0] for key in changed.get("facility", ())}, loops)


@dataclass
class RackExtras:
    """What rack messages need beyond the rack states, read once for every watched rack
    of a publish (not a query per rack)."""

    gpu_ids: dict[GpuKey, int]
    feeds: dict[int, dict[str, Payload]]

    @classmethod
    def read(cls, states: Iterable[RackState], now: float) -> RackExtras:
        states = list(states)
        nodes = [n for state in states for n in state.info.nodes]
        return cls(gpu_ids(nodes), rack_feeds([s.info.id for s in states], now))


def _rack_message(state: RackState, payload: Payload, extras: RackExtras, now: float) -> Payload:
    ids = {key: pk for key, pk in extras.gpu_ids.items() if key[0] in state.info.nodes}
    return {
        "ts": now,
        "rack": payload,
        "nodes": {str(n): plain(s) for n, s in state.nodes.items()},
        "gpus": rack_gpus(state, ids, now),
        "feeds": extras.feeds.get(state.info.id, {}),
        "liquid": liquid_entry(state, now),
    }


def build_updates(plan: UpdatePlan, wanted: set[str], now: float) -> list[tuple[str, Payload]]:
    """The group messages for what changed, only for groups someone watches: each rack
    (with its nodes, GPUs, feeds and liquid), each site (its racks, loops and facility
    figures), the fleet summary (compact)."""
    fleet_wanted = fleet_group() in wanted
    needed = [
        rack_id
        for rack_id, site_id in plan.racks.items()
        if fleet_wanted or rack_group(rack_id) in wanted or site_group(site_id) in wanted
    ]
    states = rack_states(needed, now) if needed else {}
    by_site: dict[int, Payload] = {}
    out: list[tuple[str, Payload]] = [
        (rack_changed_group(rack_id), {"ts": now})  # a signal: no figures to build
        for rack_id in plan.racks
        if rack_changed_group(rack_id) in wanted
    ]
    watched = [state for rack_id, state in states.items() if rack_group(rack_id) in wanted]
    extras = RackExtras.read(watched, now) if watched else None
    for rack_id, state in states.items():
        payload = rack_payload(state)
        if extras is not None and rack_group(rack_id) in wanted:
            out.append((rack_group(rack_id), _rack_message(state, payload, extras, now)))
        site = by_site.setdefault(state.info.site_id, {"ts": now, "racks": {}})
        site["racks"][str(rack_id)] = payload
    loops = [lid for lid, site_id in plan.loops.items() if site_group(site_id) in wanted]
    for lid, view in loop_views(loops, now).items():
        site = by_site.setdefault(view.site_id, {"ts": now, "racks": {}})
        site.setdefault("loops", {})[str(lid)] = loop_payload(view, now)
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
    if fleet_wanted and (fleet["racks"] or fleet["sites"]):
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
            marks, params = in_list(ids)
            racks |= {r for (r,) in select_rows(sql.format(marks), params)}
    return racks


_NODE_RACKS = "SELECT rack_id FROM fleet_node WHERE id IN ({})"
_FEED_RACKS = "SELECT rack_id FROM fleet_powerfeed WHERE id IN ({})"
_LOOP_RACKS = "SELECT id FROM fleet_rack WHERE loop_id IN ({})"
