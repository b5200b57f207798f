"""What the alert engine evaluates rules against: the latest state, read once per kind per
evaluation (`Snapshot`), and every signal of the catalogue computed from it per entity
(`values_for`) — raw gauges, the figures fleet.health derives, per-site PUE targets, idle
allocations (fleet/alerts/holders.py).
The engine (fleet/alerts/engine.py) turns the values into instances.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from agents.protocol import reasons as nvml
from fleet import health
from fleet.alerts.evaluate_events import event_count
from fleet.alerts.evaluate_fabric import FABRIC_DERIVED, FABRIC_PARAMETRIC
from fleet.alerts.evaluate_forecast import minutes_to_limit
from fleet.alerts.evaluate_health import in_state
from fleet.alerts.evaluate_remote_write import remote_write_lag
from fleet.alerts.evaluate_source import gpu_missing, metric_lag, silent_intervals
from fleet.alerts.holders import allocated_idle
from fleet.alerts.models import AlertRule
from fleet.alerts.signals import SCOPE_SAMPLE_KIND, Signal
from fleet.choices import LiquidClassChoices
from fleet.health import record
from fleet.models import PowerFeed, Site
from fleet.read.state import gpu_limits, rack_infos
from fleet.storage.latest import rows_to_latest, select_latest_sql

Key = tuple[int, ...]
Values = dict[Key, float | None]
Params = dict[str, Any]

# Clock-event flags: signal -> (the bit that sets it, bits that explain it away). HW
# slowdown (0x8) comes with HW thermal (0x40) or HW power brake (0x80) when either is its
# cause, and those have rules of their own; alone (over-power, an external slowdown
# signal, a driver that reports no finer reason) it is critical on the page with no other
# rule: `hw_slowdown_unexplained` is that case, so one cause never fires twice.
_FLAG_BITS: dict[str, tuple[int, int]] = {
    "hw_thermal_slowdown": (nvml.HW_THERMAL_SLOWDOWN, 0),
    "sw_thermal_slowdown": (nvml.SW_THERMAL_SLOWDOWN, 0),
    "hw_slowdown_unexplained": (
        nvml.HW_SLOWDOWN,
        nvml.HW_THERMAL_SLOWDOWN | nvml.HW_POWER_BRAKE_SLOWDOWN,
    ),
    "hw_power_brake": (nvml.HW_POWER_BRAKE_SLOWDOWN, 0),
    "sw_power_cap": (nvml.SW_POWER_CAP, 0),
}


def entity_key(key: Key) -> str:
    return ":".join(str(k) for k in key)


@dataclass
class Snapshot:
    """The latest state, read once per kind per evaluation (only the kinds rules need)."""

    now: float
    _readings: dict[str, dict[Key, health.Reading]] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict)
    _entities: dict[Key, str] = field(default_factory=dict)

    def readings(self, kind: str) -> dict[Key, health.Reading]:
        if kind not in self._readings:
            with connection.cursor() as cur:
                cur.execute(select_latest_sql(kind))
                records = cur.fetchall()
            self._readings[kind] = {
                key: health.Reading(row.values, row.ts, row.newest)
                for key, row in rows_to_latest(kind, records).items()
            }
        return self._readings[kind]

    def cached(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    def fresh(self, kind: str, metric: str) -> Values:
        now, stale = self.now, health.STALE_AFTER_S
        return {key: _num(r.fresh(metric, now, stale)) for key, r in self.readings(kind).items()}

    def gpu_limits(self) -> dict[tuple[int, int], health.GpuLimits]:
        return self.cached("gpu_limits", lambda: gpu_limits(None))  # type: ignore[no-any-return]

    def entity(self, key: Key) -> str:
        """The entity string of a key, built once per evaluation (every rule of a scope
        walks the same keys)."""
        name = self._entities.get(key)
        if name is None:
            name = self._entities[key] = entity_key(key)
        return name

    def headrooms(self) -> dict[Key, health.Headroom]:
        """Each GPU's headroom, computed once for every headroom signal."""

        def make() -> dict[Key, health.Headroom]:
            limits, now = self.gpu_limits(), self.now
            return {
                key: health.gpu_headroom(reading, limits.get((key[0], key[1])), now)
                for key, reading in self.readings("gpu").items()
            }

        return self.cached("headrooms", make)  # type: ignore[no-any-return]


def _num(value: float | int | None) -> float | None:
    return None if value is None else float(value)


def _gpu_headroom(snap: Snapshot, part: str) -> Values:
    return {key: getattr(head, part) for key, head in snap.headrooms().items()}


def _power_cap_fraction(snap: Snapshot) -> Values:
    limits = snap.gpu_limits()
    return {
        key: health.power_vs_cap(r, limits.get((key[0], key[1])), snap.now)
        for key, r in snap.readings("gpu").items()
    }


def clock_event_flag(name: str, mask: int) -> float:
    """The flag signal `name` (1.0 or 0.0) of a clock-event mask."""
    bit, unless = _FLAG_BITS[name]
    return float(bool(mask & bit) and not mask & unless)


def _flag(name: str) -> Callable[[Snapshot], Values]:
    def compute(snap: Snapshot) -> Values:
        masks = snap.fresh("gpu", "clock_event_reasons")
        return {k: None if m is None else clock_event_flag(name, int(m)) for k, m in masks.items()}

    return compute


def _rack_power_fraction(snap: Snapshot) -> Values:
    """Rack power over budget, with the fleet page's rule for where the power comes from
    (fleet.health.rack_power) but only the power figures of each node: judging every GPU's
    heat again, as a full node summary would, is most of a pass at 10,000 GPUs."""
    now = snap.now
    gpus: dict[int, list[health.Reading]] = {}
    for key, reading in snap.readings("gpu").items():
        gpus.setdefault(key[0], []).append(reading)
    nodes, racks = snap.readings("node"), snap.readings("rack")
    out: Values = {}
    for rack_id, info in rack_infos(None).items():
        powers = [health.node_power(gpus.get(n, ()), nodes.get((n,)), now) for n in info.nodes]
        kw, _ = health.rack_power(racks.get((rack_id,)), powers, now)
        out[(rack_id,)] = health.power_fraction(kw, info.budget_kw)
    return out


def _loops(snap: Snapshot) -> dict[Key, tuple[health.LoopSummary, float | None]]:
    def make() -> dict[Key, tuple[health.LoopSummary, float | None]]:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT id, supply_limit_c, liquid_class, rated_flow_lpm FROM fleet_coolingloop"
            )
            ratings = cur.fetchall()
        readings = snap.readings("loop")
        out: dict[Key, tuple[health.LoopSummary, float | None]] = {}
        for lid, limit, cls, flow in ratings:
            limit = limit if limit is not None else LiquidClassChoices.supply_limit_c(cls)
            reading = readings.get((lid,), health.EMPTY)
            summary = health.loop_summary(
                reading, snap.now, supply_limit_c=limit, rated_flow_lpm=flow
            )
            out[(lid,)] = (summary, limit)
        return out

    return snap.cached("loops", make)  # type: ignore[no-any-return]


def _supply_over_limit(snap: Snapshot) -> Values:
    return {
        k: health.supply_over_limit_c(s.supply_c, limit) for k, (s, limit) in _loops(snap).items()
    }


def _loop_field(name: str) -> Callable[[Snapshot], Values]:
    def compute(snap: Snapshot) -> Values:
        return {k: getattr(s, name) for k, (s, _) in _loops(snap).items()}

    return compute


def _feed_load_fraction(snap: Snapshot) -> Values:
    """Each feed's fresh power over its `available_kw`, the ratings read in one query."""
    feeds = PowerFeed.objects.only("voltage", "amperage", "max_utilization", "phase")
    readings = snap.readings("feed")
    return {
        (f.pk,): health.feed_load_fraction(
            readings.get((f.pk,), health.EMPTY), f.available_kw, snap.now
        )
        for f in feeds
    }


def _power_capped_clock_fraction(snap: Snapshot, params: Params) -> Values:
    # gpu_info reports no max SM clock (yet): the rule's `clock_max_mhz` is every GPU's.
    clock_max = params["clock_max_mhz"]
    clock_max = None if clock_max is None else float(clock_max)
    return {
        key: health.power_capped_clock_fraction(r, clock_max, snap.now)
        for key, r in snap.readings("gpu").items()
    }


def _pue(snap: Snapshot) -> Values:
    return {k: health.facility_pue(r, snap.now)[0] for k, r in snap.readings("facility").items()}


# Derived signals evaluated now, by (scope, name). Anything else that is not a raw
# `metric:` signal is skipped (one log line per rule) and listed in docs/rules.md.
DERIVED: dict[tuple[str, str], Callable[[Snapshot], Values]] = {
    **FABRIC_DERIVED,
    ("gpu", "headroom_slowdown_c"): lambda s: _gpu_headroom(s, "slowdown_c"),
    ("gpu", "headroom_hbm_c"): lambda s: _gpu_headroom(s, "mem_max_c"),
    ("gpu", "power_cap_fraction"): _power_cap_fraction,
    **{("gpu", name): _flag(name) for name in _FLAG_BITS},
    ("rack", "rack_power_fraction"): _rack_power_fraction,
    ("feed", "feed_load_fraction"): _feed_load_fraction,
    ("loop", "supply_over_limit_c"): _supply_over_limit,
    ("loop", "loop_delta_c"): _loop_field("delta_c"),
    ("loop", "flow_fraction"): _loop_field("flow_frac"),
    ("site", "pue"): _pue,
    ("gpu", "allocated_idle"): allocated_idle,
    ("rack", "power_minutes_to_limit"): minutes_to_limit("rack"),
    ("feed", "power_minutes_to_limit"): minutes_to_limit("feed"),
    ("loop", "supply_minutes_to_limit"): minutes_to_limit("loop_supply"),
    ("loop", "heat_minutes_to_limit"): minutes_to_limit("loop_heat"),
    ("rack", "feeds_n1_minutes_to_limit"): minutes_to_limit("feed_n1"),
    ("gpu", "headroom_minutes_to_limit"): minutes_to_limit("gpu"),
    ("site", "disk_minutes_to_limit"): minutes_to_limit("disk"),
    ("gpu", "health_watch"): in_state(record.WATCH),
    ("gpu", "health_reset_needed"): in_state(record.RESET_NEEDED),
    ("gpu", "health_replace"): in_state(record.REPLACE),
    ("site", "remote_write_lag_s"): remote_write_lag,
}

# Derived signals whose value depends on the rule's params (each param resolved against
# the signal's default), by (scope, name): one computation per distinct set of params.
PARAMETRIC: dict[tuple[str, str], Callable[[Snapshot, Params], Values]] = {
    **FABRIC_PARAMETRIC,
    **{
        (scope, "agent_silent_intervals"): silent_intervals(scope)
        for scope in ("node", "rack", "loop", "site")
    },
    **{(scope, "metric_lag_s"): metric_lag(scope) for scope in SCOPE_SAMPLE_KIND},
    ("gpu", "gpu_missing"): gpu_missing,
    ("gpu", "power_capped_clock_fraction"): _power_capped_clock_fraction,
    ("gpu", "ecc_dbe_events"): event_count("ecc_dbe"),
    ("gpu", "xid_events"): event_count("xid"),
    ("gpu", "gpu_lost_events"): event_count("gpu_lost"),
}


def evaluable(rule: AlertRule) -> bool:
    """The engine can compute this rule's signal now (with the parameters it sets)."""
    spec = rule.signal_spec
    if spec is None:
        return False
    if spec.raw_metric is not None:
        return True
    return spec.key in DERIVED or spec.key in PARAMETRIC


def resolve_params(spec: Signal, given: dict[str, Any] | None) -> Params:
    """The rule's params for `spec`, each one it leaves out at the signal's default."""
    given = given or {}
    return {p.name: given.get(p.name, p.default) for p in spec.params}


def values_for(spec: Signal, snap: Snapshot, given: dict[str, Any] | None = None) -> Values:
    metric = spec.raw_metric
    values: Values
    if metric is not None:
        kind = SCOPE_SAMPLE_KIND[spec.scope]
        values = snap.cached(f"{spec.scope}:{metric}", lambda: snap.fresh(kind, metric))
    elif spec.key in PARAMETRIC:
        params = resolve_params(spec, given)
        compute_with = PARAMETRIC[spec.key]
        tag = json.dumps(params, sort_keys=True, default=list)
        values = snap.cached(f"{spec.scope}:{spec.name}:{tag}", lambda: compute_with(snap, params))
    else:
        compute = DERIVED[spec.key]
        values = snap.cached(f"{spec.scope}:{spec.name}", lambda: compute(snap))
    return values


def site_target_rules(rule: AlertRule, snap: Snapshot) -> dict[Key, AlertRule]:
    """Per site, the rule judged against that site's `site_targets` entry: the target is
    its threshold and the clear threshold keeps the rule's hysteresis band (slugs read once
    per evaluation; a slug that is no site is ignored)."""
    targets = rule.params.get("site_targets") if rule.signal == "pue" else None
    if rule.scope != "site" or not targets:
        return {}
    slugs: dict[str, int] = snap.cached(
        "site_slugs", lambda: dict(Site.objects.values_list("slug", "id"))
    )
    band = rule.threshold - rule.effective_clear_threshold
    out: dict[Key, AlertRule] = {}
    for slug, target in targets.items():
        if slug in slugs:
            variant = copy.copy(rule)
            variant.threshold = float(target)
            variant.clear_threshold = float(target) - band
            out[(slugs[slug],)] = variant
    return out
