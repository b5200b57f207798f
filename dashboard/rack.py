"""The rack page's content: an elevation of its nodes with a tile per GPU, its power
against budget and per feed (with the N+1 view), and the loop that cools it.

Every figure and level comes from `fleet.read.state` / `fleet.health`; this module only
puts them in order and in words (units on every number, a level always as a word,
a stale figure as its age). The page is rendered on the server and says when.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet import health
from fleet.models import GPU, Node, PowerFeed, Rack
from fleet.read.forecast_now import forecasts_now
from fleet.read.forecast_sources import interval_words, sentence
from fleet.read.lost_gpus import LostSince, lost_since
from fleet.read.payloads import gpu_entry, liquid_entry
from fleet.read.state import (  # REASON_WORDS and throttle_words: imported from here by others
    REASON_WORDS,
    Payload,
    RackState,
    latest_readings,
    rack_reasons,
    rack_states,
    throttle_words,
)
from fleet.words import (
    SOURCE_WORDS,
    as_of,
    headroom_words,
    level_word,
    no_data_words,
    power_words,
)

COOLING_WORDS = dict(Rack._meta.get_field("cooling").choices or [])
FEED_TYPE_WORDS = dict(PowerFeed._meta.get_field("type").choices or [])
__all__ = ("REASON_WORDS", "gpu_tile", "rack_page", "throttle_words")


@dataclass
class GpuTile:
    pk: int  # the GPU page: /gpus/<pk>/
    index: int
    model: str
    level: str
    level_word: str
    temp: str
    headroom: str
    power: str
    reasons: list[str]  # decoded clock-event reasons, "name: meaning"
    throttling: bool
    stale: str | None  # "no data for 14 s" when nothing of it is fresh (its node silent too)
    lost: str | None = None  # "off the bus since 03:23 UTC (XID 79)": its node reports, it not


@dataclass
class NodeRow:
    id: int
    name: str
    position: int
    model: str
    level: str
    level_word: str
    power: str
    inlet: str | None
    stale: str | None
    gpus: list[GpuTile] = field(default_factory=list)
    lost: str = ""  # "2 GPUs lost" while the node reports


@dataclass
class FeedRow:
    id: int
    name: str
    type: str
    power: str
    available_kw: float
    load: str
    carries_alone: bool | None  # would this feed alone carry the rack's measured power


@dataclass
class Liquid:
    loop_id: int | None
    loop_name: str | None
    loop_level: str
    loop_level_word: str
    supply: str
    return_: str
    flow: str


@dataclass(frozen=True)
class ForecastLine:
    """One subject's time to limit in words ("A07 reaches 45 kW in ~40 min at this
    trend") and its interval (a title and small print)."""

    subject: str  # rack, feed, feed_n1, loop_supply, loop_heat
    words: str
    interval: str


@dataclass
class RackPage:
    id: int
    name: str
    hall: str
    cooling: str
    level: str
    level_word: str
    reasons: list[str]
    power: str
    budget_kw: float
    power_pct: float | None
    power_level: str
    source: str
    stale: str | None
    feeds: list[FeedRow]
    redundancy: list[str]
    redundancy_holds: bool | None
    liquid: Liquid | None
    nodes: list[NodeRow]
    as_of: str
    forecasts: list[ForecastLine] = field(default_factory=list)


def kw_words(kw: float | None, ts: float | None, now: float) -> str:
    return no_data_words(ts, now) if kw is None else power_words(kw * 1000)


def gpu_tile(
    gpu: GPU,
    reading: health.Reading,
    limits: health.GpuLimits | None,
    now: float,
    *,
    node_reports: bool,
    tz: str = "UTC",
) -> GpuTile:
    """A GPU tile in words (the node and GPU pages; the rack page builds its many at once)."""
    return gpu_tiles(
        [(gpu, reading, limits)], now, node_reports={gpu.node_id: node_reports}, tz=tz
    )[0]


def gpu_tiles(
    gpus: list[tuple[GPU, health.Reading, health.GpuLimits | None]],
    now: float,
    *,
    node_reports: dict[int, bool],
    tz: str = "UTC",
) -> list[GpuTile]:
    """GPU tiles in words, with since when and why each lost GPU is lost (its events read
    once for all of them)."""
    entries = [
        gpu_entry(
            g.node_id,
            g.index,
            reading,
            limits,
            now,
            node_reports=node_reports.get(g.node_id, False),
        )
        for g, reading, limits in gpus
    ]
    since = lost_since(
        ((g.node_id, g.index), health.newest_ts(reading))
        for (g, reading, _), entry in zip(gpus, entries, strict=True)
        if entry["lost"]
    )
    return [
        tile_from_entry(g, entry, now, since.get((g.node_id, g.index)), tz)
        for (g, _, _), entry in zip(gpus, entries, strict=True)
    ]


def tile_from_entry(
    gpu: GPU, entry: Payload, now: float, since: LostSince | None = None, tz: str = "UTC"
) -> GpuTile:
    """A GPU tile in words, from the same entry the live rack message carries
    (`fleet.read.payloads.gpu_entry`), so the page and a live GPU view never disagree."""
    lost = None
    if entry["lost"]:
        lost = since.words(tz) if since is not None else entry["lost_words"]
    stale = no_data_words(entry["ts"], now) if entry["stale"] and not lost else None
    temp_c, power_w, frac = entry["temp_c"], entry["power_w"], entry["power_frac"]
    temp = (stale or "no temperature") if temp_c is None else f"{temp_c:.0f} °C"
    if power_w is None:
        power = stale or "no power reading"
    elif frac is None:
        power = f"{power_w:.0f} W"
    else:
        power = f"{power_w:.0f} W ({100 * frac:.0f} % of cap)"
    return GpuTile(
        pk=gpu.pk,
        index=gpu.index,
        model=gpu.model,
        level=entry["level"],
        level_word=entry["level_word"],
        temp=temp,
        headroom=headroom_words(entry["headroom_c"]),
        power=power,
        reasons=entry["reasons"],
        throttling=entry["throttling"],
        stale=stale,
        lost=lost,
    )


def node_row(node: Node, summary: health.NodeSummary | None, now: float) -> NodeRow:
    if summary is None:
        return NodeRow(
            node.id,
            node.name,
            node.position,
            node.model,
            health.Level.UNKNOWN.value,
            level_word(health.Level.UNKNOWN),
            "",
            None,
            no_data_words(None, 0.0),
        )
    if summary.power_w is not None:
        power = f"{summary.power_w / 1000:.2f} kW (node meter)"
    elif summary.gpu_power_w is not None:
        power = f"{summary.gpu_power_w / 1000:.2f} kW (GPUs only)"
    else:
        power = "no power reading"
    return NodeRow(
        id=node.id,
        name=node.name,
        position=node.position,
        model=node.model,
        level=summary.level.value,
        level_word=level_word(summary.level),
        power=power,
        inlet=None if summary.inlet_c is None else f"{summary.inlet_c:.1f} °C inlet",
        stale=no_data_words(summary.ts, now) if summary.stale else None,
        lost=health.gpus_lost_words(summary.lost_gpus) if summary.lost_gpus else "",
    )


def elevation(state: RackState, now: float, tz: str = "UTC") -> list[NodeRow]:
    """Nodes top of the rack first (highest U), each with its GPUs in index order."""
    nodes = list(Node.objects.filter(rack_id=state.info.id).order_by("-position", "name"))
    gpus: dict[int, list[GPU]] = {}
    for gpu in GPU.objects.filter(node_id__in=[n.id for n in nodes]).order_by("node_id", "index"):
        gpus.setdefault(gpu.node_id, []).append(gpu)
    reporting = {node_id: not n.stale for node_id, n in state.nodes.items()}
    listed = [g for node in nodes for g in gpus.get(node.id, [])]
    tiles = gpu_tiles(
        [(g, *state.gpus.get((g.node_id, g.index), (health.EMPTY, None))) for g in listed],
        now,
        node_reports=reporting,
        tz=tz,
    )
    by_gpu = {g.pk: tile for g, tile in zip(listed, tiles, strict=True)}
    rows = []
    for node in nodes:
        row = node_row(node, state.nodes.get(node.id), now)
        row.gpus = [by_gpu[g.pk] for g in gpus.get(node.id, [])]
        rows.append(row)
    return rows


def feed_rows(rack_id: int, rack_kw: float | None, now: float) -> list[FeedRow]:
    feeds = list(PowerFeed.objects.filter(rack_id=rack_id).order_by("name"))
    readings = latest_readings("feed", [f.id for f in feeds])
    rows = []
    for feed in feeds:
        reading = readings.get((feed.id,), health.EMPTY)
        watts = reading.fresh("power_w", now, health.STALE_AFTER_S)
        fraction = health.feed_load_fraction(reading, feed.available_kw, now)
        rows.append(
            FeedRow(
                id=feed.id,
                name=feed.name,
                type=FEED_TYPE_WORDS.get(feed.type, feed.type),
                power=kw_words(
                    None if watts is None else watts / 1000, health.newest_ts(reading), now
                ),
                available_kw=feed.available_kw,
                load="–" if fraction is None else f"{100 * fraction:.0f} % of rating",
                carries_alone=None if rack_kw is None else rack_kw <= feed.available_kw,
            )
        )
    return rows


def redundancy(
    feeds: list[FeedRow], rack_kw: float | None, budget_kw: float
) -> tuple[list[str], bool | None]:
    """N+1: if any one feed fails, do the others carry the whole rack? Judged on the power
    measured now and, separately, on the budget the rack may draw (a fact, no threshold)."""
    if len(feeds) < 2:
        return ["One feed only: losing it loses the rack (no N+1)."], False if feeds else None
    lines: list[str] = []
    holds: bool | None = None if rack_kw is None else True
    for lost in feeds:
        left = sum(f.available_kw for f in feeds if f is not lost)
        others = ", ".join(f.name for f in feeds if f is not lost)
        if rack_kw is None:
            now_words = "rack power unknown now"
        else:
            carries = rack_kw <= left
            holds = holds and carries
            now_words = (
                f"{'carries' if carries else 'does NOT carry'} the {rack_kw:.1f} kW drawn now"
            )
        budget_words = "fits" if budget_kw <= left else "does not fit"
        lines.append(
            f"If feed {lost.name} fails, {others} can carry {left:.1f} kW: {now_words};"
            f" the {budget_kw:.0f} kW budget {budget_words}."
        )
    return lines, holds


def liquid(state: RackState, now: float) -> Liquid | None:
    """The loop that cools a liquid rack and the rack's own liquid figures (its manifold
    sensors when it has them, else the loop's), from `fleet.read.payloads.liquid_entry`."""
    entry = liquid_entry(state, now)
    if entry is None:
        return None

    def figure(key: str, unit: str, fmt: str) -> str:
        value, source = entry[key], entry[key.rsplit("_", 1)[0] + "_from"]
        if value is None:
            return no_data_words(entry["ts"], now)
        return f"{value:{fmt}} {unit} ({source})"

    return Liquid(
        loop_id=entry["loop_id"],
        loop_name=entry["loop_name"],
        loop_level=entry["loop_level"],
        loop_level_word=entry["loop_level_word"],
        supply=figure("supply_c", "°C", ".1f"),
        return_=figure("return_c", "°C", ".1f"),
        flow=figure("flow_lpm", "L/min", ".0f"),
    )


def forecast_lines(state: RackState, feed_ids: set[int], now: float) -> list[ForecastLine]:
    """The rack's, its feeds' (each, and together against their N+1) and its loop's
    forecasts that reach their limit (this minute's, fleet.read.forecast_now); none where
    none does."""
    info = state.info
    ours = {"rack": {info.id}, "feed": feed_ids, "feed_n1": {info.id}}
    if info.loop_id is not None:
        ours.update(loop_supply={info.loop_id}, loop_heat={info.loop_id})
    lines = []
    for item in forecasts_now(info.site_id, now):
        words = sentence(item) if item.entity_id in ours.get(item.subject, ()) else None
        if words is not None:
            lines.append(ForecastLine(item.subject, words, interval_words(item) or ""))
    return lines


def site_timezone(rack_id: int) -> str:
    """The time zone of the rack's site, in which the page says when a GPU was lost."""
    tz = Rack.objects.filter(pk=rack_id).values_list("hall__site__timezone", flat=True).first()
    return tz or "UTC"


def rack_page(rack_id: int, now: float) -> RackPage | None:
    """The rack page's content, None for a rack that does not exist."""
    state = rack_states([rack_id], now).get(rack_id)
    if state is None:
        return None
    s, info = state.summary, state.info
    feeds = feed_rows(rack_id, s.power_kw, now)
    lines, holds = redundancy(feeds, s.power_kw, info.budget_kw)
    return RackPage(
        id=info.id,
        name=info.name,
        hall=info.hall,
        cooling=COOLING_WORDS.get(info.cooling, info.cooling),
        level=state.level.value,
        level_word=level_word(state.level),
        reasons=rack_reasons(state),
        power=kw_words(s.power_kw, s.ts, now),
        budget_kw=info.budget_kw,
        power_pct=s.power_pct,
        power_level=s.power_level.value,
        source=SOURCE_WORDS.get(s.power_source, s.power_source),
        stale=no_data_words(s.ts, now) if s.stale else None,
        feeds=feeds,
        redundancy=lines,
        redundancy_holds=holds,
        liquid=liquid(state, now),
        nodes=elevation(state, now, site_timezone(rack_id)),
        as_of=as_of(now),
        forecasts=forecast_lines(state, {f.id for f in feeds}, now),
    )
