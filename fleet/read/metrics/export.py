"""Fleetwatch's view in the Prometheus exposition format, rendered from the database
(latest state, inventory, alert and delivery tables), so every server process answers
/metrics the same.

Names are snake_case with their unit (`_celsius`, `_watts`, `_hertz`, `_ratio`,
`_seconds`, `_total`); labels are bounded by the inventory (site, rack, node, GPU index,
feed, loop) or by fixed sets (state, severity, reason, kind) — never a free-form value.
Figures older than `health.STALE_AFTER_S` are left out (a missing series, as Prometheus
expects), and `*_stale` says which entities have nothing fresh. Per-GPU series can be
limited to some sites (`settings.METRICS_GPU_SITES`) for very large fleets; rack, loop,
feed and site series are always there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.conf import settings

from fleet import health
from fleet.read.metrics.agent_series import agent_series
from fleet.read.metrics.remote_write_series import remote_write_series
from fleet.read.metrics.system_series import (
    alerts_series,
    deliveries_series,
    incidents_series,
    ingest_series,
    rejections_series,
    sources_series,
)
from fleet.read.payloads import rack_feeds
from fleet.read.site_summary import site_payloads
from fleet.read.state import (
    RackState,
    fresh_value,
    gpu_ids,
    gpu_limits,
    loop_views,
    lost_gpus,
    rack_summaries,
    select_rows,
    summary_readings,
)

LEVEL_VALUES = {health.Level.OK: 0.0, health.Level.WARN: 1.0, health.Level.CRIT: 2.0}
MHZ = 1e6

GPU_LABELS = ("site", "rack", "node", "gpu")
# What a GPU's series need from its latest row (gpu_summary's fields and the SM clock):
# reading every metric column of 10,000 rows cost most of a render.
GPU_FIELDS = (
    "temp_gpu_c",
    "temp_mem_c",
    "temp_margin_c",
    "power_w",
    "power_limit_w",
    "clock_event_reasons",
    "clock_sm_mhz",
)
RACK_LABELS = ("site", "rack")


@dataclass
class Family:
    """One metric family: its samples as (label text, value). The text format is written
    here rather than by prometheus_client's `generate_latest`, which validates and escapes
    every label of every sample: 8.5 s for the 118,000 samples of a 10,000-GPU fleet on
    the project's VM, against a 1 s target. Labels are escaped once per entity instead."""

    name: str
    kind: str  # gauge | counter
    doc: str
    label_names: tuple[str, ...]
    samples: list[tuple[str, float]] = field(default_factory=list)

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        self.samples.append((label_text(self.label_names, labels), value))

    def add_labelled(self, text: str, value: float) -> None:
        """A sample whose label text was built once (`label_text`) for many families."""
        self.samples.append((text, value))

    def lines(self) -> Iterable[str]:
        name = self.name + "_total" if self.kind == "counter" else self.name
        yield f"# HELP {name} {_escape_doc(self.doc)}"
        yield f"# TYPE {name} {self.kind}"
        for labels, value in self.samples:
            yield f"{name}{labels} {_number(value)}"


@dataclass
class Families:
    """The metric families of one render, in the order they were declared."""

    items: dict[str, Family] = field(default_factory=dict)

    def gauge(self, name: str, doc: str, labels: Iterable[str]) -> Family:
        family = Family(name, "gauge", doc, tuple(labels))
        self.items[name] = family
        return family

    def counter(self, name: str, doc: str, labels: Iterable[str]) -> Family:
        family = Family(name, "counter", doc, tuple(labels))
        self.items[name] = family
        return family


def label_text(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    pairs = ",".join(f'{n}="{_escape_value(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_doc(doc: str) -> str:
    return doc.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def gpu_series_sites(site_slugs: Iterable[str]) -> set[str]:
    """The sites whose GPUs get per-GPU series (`METRICS_GPU_SITES`: all, none, or a
    comma-separated list of site slugs)."""
    wanted = settings.METRICS_GPU_SITES.strip()
    if wanted == "all":
        return set(site_slugs)
    if wanted == "none":
        return set()
    return {s.strip() for s in wanted.split(",") if s.strip()}


def collect(now: float) -> list[Family]:
    families = Families()
    sites = dict(select_rows("SELECT id, slug FROM fleet_site"))
    states = rack_summaries(None, now)  # racks and nodes; GPUs folded in the database
    per_gpu = gpu_series_sites(sites.values())
    _gpus(families, states, sites, per_gpu, now)
    _racks(families, states, sites)
    _feeds(families, states, sites, now)
    _loops(families, sites, now)
    _sites(families, sites, now, states)
    incidents_series(families, sites)
    alerts_series(families)
    sources_series(families, now)
    agent_series(families, sites)
    deliveries_series(families)
    rejections_series(families)
    ingest_series(families)
    remote_write_series(families, now)
    return list(families.items.values())


@dataclass
class GpuFamilies:
    temp: Family
    head: Family
    power: Family
    cap: Family
    cap_ratio: Family
    clock: Family
    throttling: Family
    reason: Family
    level: Family
    stale: Family
    lost: Family


# Each GPU family: (GpuFamilies field, metric name, help, a label beyond GPU_LABELS), in
# exposition order.
_GPU_FAMILIES: tuple[tuple[str, str, str, str | None], ...] = (
    ("temp", "fleetwatch_gpu_temperature_celsius", "GPU core temperature", None),
    (
        "head",
        "fleetwatch_gpu_slowdown_headroom_celsius",
        "degrees left to the GPU's own slowdown limit (negative: past it)",
        None,
    ),
    ("power", "fleetwatch_gpu_power_watts", "GPU board power", None),
    (
        "cap",
        "fleetwatch_gpu_power_limit_watts",
        "the enforced power cap (else its maximum)",
        None,
    ),
    ("cap_ratio", "fleetwatch_gpu_power_cap_ratio", "power against its cap", None),
    ("clock", "fleetwatch_gpu_sm_clock_hertz", "SM clock", None),
    (
        "throttling",
        "fleetwatch_gpu_throttling",
        "1 while a thermal or power reason slows the GPU (decoded clock-event mask)",
        "kind",
    ),
    (
        "reason",
        "fleetwatch_gpu_clock_event_reason",
        "1 for each clock-event reason active now (hw_thermal, sw_thermal, power_cap, ...)",
        "reason",
    ),
    ("level", "fleetwatch_gpu_health_level", "0 ok, 1 warning, 2 critical (absent: no data)", None),
    ("stale", "fleetwatch_gpu_stale", "1 when nothing of the GPU is fresh", None),
    (
        "lost",
        "fleetwatch_gpu_lost",
        "1 when its node reports and the GPU does not (off the bus: health level 2);"
        " 0 otherwise, also when the node is silent (then no data)",
        None,
    ),
)


def _gpu_families(f: Families) -> GpuFamilies:
    return GpuFamilies(
        **{
            field: f.gauge(name, help, GPU_LABELS if extra is None else (*GPU_LABELS, extra))
            for field, name, help, extra in _GPU_FAMILIES
        }
    )


def _gpus(
    f: Families, states: dict[int, RackState], sites: dict[int, str], per_gpu: set[str], now: float
) -> None:
    fams = _gpu_families(f)
    shown = [s for s in states.values() if sites.get(s.info.site_id, "") in per_gpu]
    node_ids = [node for state in shown for node in state.info.nodes]
    by_node: dict[int, list[int]] = {}
    for node_id, index in gpu_ids(node_ids):
        by_node.setdefault(node_id, []).append(index)
    readings = summary_readings("gpu", "node_id", node_ids, GPU_FIELDS)
    limits_of = gpu_limits(node_ids)
    for state in shown:
        site = sites.get(state.info.site_id, "")
        for node_id in sorted(state.info.nodes):
            node = state.info.nodes[node_id]
            for index in sorted(by_node.get(node_id, ())):
                reading = readings.get((node_id, index), health.EMPTY)
                limits = limits_of.get((node_id, index))
                labels = label_text(GPU_LABELS, (site, state.info.name, node, str(index)))
                summary = state.nodes.get(node_id)
                reporting = summary is not None and not summary.stale
                _gpu(fams, labels, reading, limits, now, reporting)


def _gpu(
    fams: GpuFamilies,
    labels: str,
    reading: health.Reading,
    limits: health.GpuLimits | None,
    now: float,
    node_reports: bool,
) -> None:
    s = health.gpu_summary(reading, limits, now)
    lost = health.gpu_lost_on(reading, node_reports, now)
    fams.stale.add_labelled(labels, 1.0 if s.stale else 0.0)
    fams.lost.add_labelled(labels, 1.0 if lost else 0.0)
    if lost:
        fams.level.add_labelled(labels, LEVEL_VALUES[health.LOST_LEVEL])
    if s.stale:
        return
    limit = fresh_value(reading, "power_limit_w", now)
    if limit is None and limits is not None:
        limit = limits.power_limit_max_w
    sm = fresh_value(reading, "clock_sm_mhz", now)
    for family, value in (
        (fams.temp, s.temp_c),
        (fams.head, s.headroom.slowdown_c),
        (fams.power, s.power_w),
        (fams.cap, limit),
        (fams.cap_ratio, s.power_frac),
        (fams.clock, None if sm is None else sm * MHZ),
    ):
        if value is not None:
            family.add_labelled(labels, float(value))
    if s.throttle.mask is not None:
        inner = labels[1:-1]  # the GPU's labels, then one more
        thermal, power = float(bool(s.throttle.thermal)), float(bool(s.throttle.power))
        fams.throttling.add_labelled(_more(inner, "kind", "thermal"), thermal)
        fams.throttling.add_labelled(_more(inner, "kind", "power"), power)
        for name in s.throttle.reasons:
            fams.reason.add_labelled(_more(inner, "reason", name), 1.0)
    if s.level in LEVEL_VALUES:
        fams.level.add_labelled(labels, LEVEL_VALUES[s.level])


def _racks(f: Families, states: dict[int, RackState], sites: dict[int, str]) -> None:
    power = f.gauge(
        "fleetwatch_rack_power_watts", "rack power (its meter, else its nodes')", RACK_LABELS
    )
    budget = f.gauge("fleetwatch_rack_power_budget_watts", "the rack's power budget", RACK_LABELS)
    ratio = f.gauge(
        "fleetwatch_rack_power_budget_ratio", "rack power against its budget", RACK_LABELS
    )
    head = f.gauge(
        "fleetwatch_rack_min_slowdown_headroom_celsius",
        "the least headroom of any GPU in the rack to its own slowdown limit",
        RACK_LABELS,
    )
    throttling = f.gauge(
        "fleetwatch_rack_gpus_throttling", "GPUs slowed now, by kind", (*RACK_LABELS, "kind")
    )
    level = f.gauge(
        "fleetwatch_rack_health_level",
        "the worst of the rack's signals and its cooling loop's: 0 ok, 1 warning, 2 critical",
        RACK_LABELS,
    )
    stale = f.gauge("fleetwatch_rack_stale", "1 when nothing of the rack is fresh", RACK_LABELS)
    lost = f.gauge(
        "fleetwatch_rack_gpus_lost",
        "GPUs off the bus: their node reports, they do not (each makes the rack critical)",
        RACK_LABELS,
    )
    for state in states.values():
        labels = [sites.get(state.info.site_id, ""), state.info.name]
        s = state.summary
        budget.add_metric(labels, state.info.budget_kw * 1000.0)
        _maybe(power, labels, None if s.power_kw is None else s.power_kw * 1000.0)
        _maybe(ratio, labels, None if s.power_pct is None else s.power_pct / 100.0)
        _maybe(head, labels, s.min_headroom_c)
        throttling.add_metric([*labels, "thermal"], float(s.throttling_thermal))
        throttling.add_metric([*labels, "power"], float(s.throttling_power))
        if state.level in LEVEL_VALUES:
            level.add_metric(labels, LEVEL_VALUES[state.level])
        stale.add_metric(labels, 1.0 if s.stale else 0.0)
        lost.add_metric(labels, float(lost_gpus(state)))


def _feeds(f: Families, states: dict[int, RackState], sites: dict[int, str], now: float) -> None:
    labels_of = ("site", "rack", "feed")
    power = f.gauge("fleetwatch_feed_power_watts", "power drawn through the feed", labels_of)
    load = f.gauge("fleetwatch_feed_load_ratio", "feed power against its usable rating", labels_of)
    names = dict(select_rows("SELECT id, name FROM fleet_powerfeed"))
    for rack_id, feeds in rack_feeds(states.keys(), now).items():
        state = states.get(rack_id)
        if state is None:
            continue
        for feed_id, entry in feeds.items():
            labels = [
                sites.get(state.info.site_id, ""),
                state.info.name,
                names.get(int(feed_id), feed_id),
            ]
            _maybe(power, labels, entry["power_w"])
            _maybe(load, labels, entry["load_frac"])


def _loops(f: Families, sites: dict[int, str], now: float) -> None:
    labels_of = ("site", "loop")
    supply = f.gauge("fleetwatch_loop_supply_celsius", "coolant supply temperature", labels_of)
    ret = f.gauge("fleetwatch_loop_return_celsius", "coolant return temperature", labels_of)
    delta = f.gauge("fleetwatch_loop_delta_celsius", "return minus supply", labels_of)
    flow = f.gauge("fleetwatch_loop_flow_liters_per_minute", "coolant flow", labels_of)
    failed = f.gauge("fleetwatch_loop_pumps_failed", "pumps reported failed", labels_of)
    leak = f.gauge("fleetwatch_loop_leak", "0 none, 1 warning, 2 leak detected", labels_of)
    level = f.gauge(
        "fleetwatch_loop_health_level", "0 ok, 1 warning, 2 critical (absent: no data)", labels_of
    )
    loop_ids = [loop_id for (loop_id,) in select_rows("SELECT id FROM fleet_coolingloop")]
    for view in loop_views(loop_ids, now).values():
        labels = [sites.get(view.site_id, ""), view.name]
        s = view.summary
        for family, value in (
            (supply, s.supply_c),
            (ret, s.return_c),
            (delta, s.delta_c),
            (flow, s.flow_lpm),
            (failed, s.pumps_failed),
            (leak, s.leak),
        ):
            _maybe(family, labels, value)
        if s.level in LEVEL_VALUES:
            level.add_metric(labels, LEVEL_VALUES[s.level])


def _sites(f: Families, sites: dict[int, str], now: float, states: dict[int, RackState]) -> None:
    pue = f.gauge("fleetwatch_site_pue", "power usage effectiveness now (facility / IT)", ["site"])
    category = f.gauge(
        "fleetwatch_site_pue_category_info",
        "the ISO/IEC 30134-2 category the site's meters allow (value 1)",
        ["site", "category"],
    )
    total = f.gauge("fleetwatch_site_facility_power_watts", "total facility power", ["site"])
    it = f.gauge("fleetwatch_site_it_power_watts", "IT equipment power", ["site"])
    cooling = f.gauge(
        "fleetwatch_site_cooling_power_watts",
        "cooling power: the plant's meter, else facility minus IT (see source)",
        ["site", "source"],
    )
    stale = f.gauge(
        "fleetwatch_site_node_agents_stale",
        f"nodes whose newest data is {health.STALE_INTERVALS:g} or more of the intervals"
        f" it comes at old (at least {health.STALE_AFTER_S:g} s)",
        ["site"],
    )
    lost = f.gauge(
        "fleetwatch_site_gpus_lost",
        "GPUs off the bus at the site: their node reports, they do not",
        ["site"],
    )
    lost_at: dict[int, int] = dict.fromkeys(sites, 0)
    for state in states.values():
        lost_at[state.info.site_id] = lost_at.get(state.info.site_id, 0) + lost_gpus(state)
    for site_id, figures in site_payloads(sites.keys(), now).items():
        slug = sites[site_id]
        lost.add_metric([slug], float(lost_at.get(site_id, 0)))
        _maybe(pue, [slug], figures.get("pue"))
        if figures.get("pue_category") is not None:
            category.add_metric([slug, str(figures["pue_category"])], 1.0)
        _maybe(total, [slug], figures.get("total_power_w"))
        _maybe(it, [slug], figures.get("it_power_w"))
        if figures.get("cooling_source"):
            _maybe(cooling, [slug, figures["cooling_source"]], figures.get("cooling_power_w"))
        stale.add_metric([slug], float(figures["agents"]["stale"]))


def _maybe(family: Family, labels: list[str], value: float | int | None) -> None:
    if value is not None:
        family.add_metric(labels, float(value))


def _more(inner: str, name: str, value: str) -> str:
    return "{" + inner + f',{name}="{_escape_value(value)}"' + "}"


def render(now: float) -> bytes:
    """The exposition text (format 0.0.4) of everything above at `now`."""
    lines = [line for family in collect(now) for line in family.lines()]
    return ("\n".join(lines) + "\n").encode()
