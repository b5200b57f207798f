"""The fleet overview page's content: every rack's state from `fleet.read.state`, and each
site's strip from `fleet.read.site_summary`.

The figures and levels come from `fleet.health` on the server. The heat map has modes
(the worst of every signal, power against budget, GPU headroom, throttling, alerts
firing); the page's JavaScript (static/dashboard/fleet.js) switches between them without
a reload and renders the payloads it is pushed: each rack's `modes` (a level and a figure
per mode, `fleet.read.state.rack_modes`), the alert levels of the site payloads, and the
words of fleet/words.py. It judges nothing; it ticks ages and sums the GPUs throttling per
site. The server renders the default mode, so the page reads right before its script runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from fleet import health
from fleet.health import STALE_AFTER_S
from fleet.models import Rack, Site
from fleet.read.forecast_disk import disk_words
from fleet.read.forecast_now import disk_now, forecasts_now
from fleet.read.forecast_sources import interval_words, sentence
from fleet.read.site_summary import agent_counts, site_payloads
from fleet.read.state import RackState, rack_payload, rack_summaries
from fleet.remote_write.lag import lag_words
from fleet.words import level_word, say, throttling_words

COOLING_LABELS = dict(Rack._meta.get_field("cooling").choices or [])

# The heat-map modes: (value in ?mode=, the button's label). "overall" is the default.
MODES: tuple[tuple[str, str], ...] = (
    ("overall", "Overall (worst signal)"),
    ("power", "Power against budget"),
    ("headroom", "Hottest GPU's headroom"),
    ("throttling", "GPUs throttling"),
    ("alerts", "Alerts firing"),
)
DEFAULT_MODE = MODES[0][0]


@dataclass
class RackTile:
    """One tile as first rendered: every text worked out here, once, so the template only
    places strings (500 tiles: template lookups and URL reversing add up)."""

    id: int
    name: str
    cooling: str
    cooling_label: str
    loop_id: int | None  # the tile links its loop to the cooling page
    data: dict[str, Any]
    href: str
    loop_href: str
    word: str  # the rack's overall level in a word (the default mode's)
    figure: str  # why, in words (the default mode's figure)
    loop_word: str
    power: str  # kW now, or "–"
    budget: str  # kW
    # "A07 reaches 45 kW in ~40 min at this trend" and its interval; "" without a
    # forecast. Rendered with the page, not pushed (docs/ui.md).
    forecast: str = ""
    forecast_interval: str = ""


@dataclass
class SiteStrip:
    id: int
    name: str
    figures: dict[str, Any]  # site_payload's, plus the GPUs throttling summed here

    @property
    def total_power(self) -> str:
        return str(self.figures["total_power_words"])

    @property
    def it_power(self) -> str:
        return str(self.figures["it_power_words"])

    @property
    def pue(self) -> str:
        return str(self.figures["pue_words"])

    @property
    def alerts_critical(self) -> str:
        return say("alerts_critical", critical=self.figures["alerts"]["critical"])


class Halls(dict[str, list[RackTile]]):
    """Racks by hall, carrying the site strips too: the view (dashboard/views.py) hands
    the template only `halls` and `payload`, and the strips are rendered on the server."""

    site_strips: list[SiteStrip]
    modes = MODES


def fleet_overview(now: float, sites: set[int] | None = None) -> tuple[Halls, dict[str, Any]]:
    """Racks grouped by hall (in floor order; "site · hall" when several sites show), and
    the page's initial payload: every rack's, every site's strip, where each rack is.
    `sites`: the sites the user may see (None: all, as `fleet.access.visible_site_ids`)."""
    states = {
        rack_id: state
        for rack_id, state in rack_summaries(None, now).items()
        if sites is None or state.info.site_id in sites
    }
    names = site_names({s.info.site_id for s in states.values()} if sites is None else sites)
    halls = Halls()
    racks: dict[str, Any] = {}
    links = Links.reverse()
    forecasts = rack_forecasts({s.info.site_id for s in states.values()}, now)
    for rack_id, state in states.items():
        tile = rack_tile(state, links)
        tile.forecast, tile.forecast_interval = forecasts.get(rack_id, ("", ""))
        racks[str(rack_id)] = tile.data
        hall = state.info.hall
        if len(names) > 1:
            hall = f"{names.get(state.info.site_id, '')} · {hall}"
        halls.setdefault(hall, []).append(tile)
    strips = site_strips(names, racks, states, now)
    halls.site_strips = strips
    payload = {
        "now": now,
        "racks": racks,
        "stale_after_s": STALE_AFTER_S,
        "sites": {str(s.id): s.figures for s in strips},
        # Where each rack is, for the alert mode and the per-site throttling sums.
        "places": {str(r): [s.info.site_id, s.info.loop_id] for r, s in states.items()},
    }
    return halls, payload


def database_disk(now: float) -> tuple[str, str] | None:
    """The database's size against its disk and its time to limit, in words, with the
    interval (a title); None before the task fleet.forecasts has measured it."""
    state = disk_now(now)
    return None if state is None else disk_words(state)


def remote_write(now: float) -> tuple[str, str] | None:
    """How far remote write to the site's TSDB is behind, in words, with the last failure
    (a title); None while it is off."""
    return lag_words(now)


def rack_forecasts(site_ids: Iterable[int], now: float) -> dict[int, tuple[str, str]]:
    """Each rack with a forecast to reach its budget: (its sentence, its interval)."""
    out: dict[int, tuple[str, str]] = {}
    for site_id in site_ids:
        for item in forecasts_now(site_id, now):
            words = sentence(item) if item.subject == "rack" else None
            if words is not None:
                out[item.entity_id] = (words, interval_words(item) or "")
    return out


@dataclass(frozen=True)
class Links:
    """The rack and cooling pages' URLs, reversed once per render, not per tile."""

    rack: str  # with "{}" for the rack id
    cooling: str

    @classmethod
    def reverse(cls) -> Links:
        marker = 987654321
        rack = reverse("rack", args=[marker]).replace(str(marker), "{}")
        return cls(rack, reverse("cooling"))


def rack_tile(state: RackState, links: Links) -> RackTile:
    info = state.info
    data = rack_payload(state)
    loop_level = data.get("loop_level")
    return RackTile(
        id=info.id,
        name=info.name,
        cooling=info.cooling,
        cooling_label=COOLING_LABELS.get(info.cooling, ""),
        loop_id=info.loop_id,
        data=data,
        href=links.rack.format(info.id),
        loop_href=f"{links.cooling}#loop-{info.loop_id}",
        word=level_word(health.Level(data["level"])),
        figure=data["modes"]["overall"]["figure"],
        loop_word="" if loop_level is None else level_word(health.Level(loop_level)),
        power="–" if data["power_kw"] is None else f"{data['power_kw']:.1f}",
        budget=f"{info.budget_kw:.0f}",
    )


def site_names(site_ids: Iterable[int]) -> dict[int, str]:
    ids = set(site_ids)
    return dict(Site.objects.filter(pk__in=ids).order_by("name").values_list("pk", "name"))


def site_strips(
    names: dict[int, str], racks: dict[str, Any], states: dict[int, RackState], now: float
) -> list[SiteStrip]:
    """Each site's strip: its facility figures and counts, and the GPUs throttling and
    lost now summed from its racks' payloads (the page keeps those sums live the same way)."""
    # Each node's newest data is its summary's `ts`: no second read of the latest state.
    newest = (
        (s.info.site_id, node_id, n.ts) for s in states.values() for node_id, n in s.nodes.items()
    )
    figures = site_payloads(names, now, agent_counts(newest, now))
    for payload in figures.values():
        payload["throttling_thermal"] = payload["throttling_power"] = payload["lost_gpus"] = 0
    for rack_id, state in states.items():
        site = figures[state.info.site_id]
        rack = racks[str(rack_id)]
        site["throttling_thermal"] += rack["throttling_thermal"]
        site["throttling_power"] += rack["throttling_power"]
        site["lost_gpus"] += rack["lost_gpus"]
    for payload in figures.values():
        payload["throttling_level"] = health.throttling_level(payload["throttling_thermal"]).value
        payload["throttling_words"] = throttling_words(
            payload["throttling_thermal"], payload["throttling_power"]
        )
        lost = payload["lost_gpus"]
        payload["lost_level"] = health.LOST_LEVEL.value if lost else health.Level.OK.value
    return [SiteStrip(site_id, name, figures[site_id]) for site_id, name in names.items()]
