"""The cooling page's content: each CDU's loop with its figures, level and why, and the
racks it serves with their state.

Levels come from `fleet.health` (through `fleet.read.state.loop_views` and `rack_states`);
the reasons (`fleet.read.state.loop_reasons`, shared with the live payload) name the figure
behind each non-OK level the same way `health.loop_summary` judges it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from fleet import health
from fleet.models import CoolingLoop, Rack
from fleet.read.state import loop_reasons, loop_views, rack_states
from fleet.words import age_words, as_of, level_word, no_data_words, power_words, say


@dataclass
class ServedRack:
    id: int
    name: str
    level: str
    level_word: str
    throttling: int  # GPUs throttling now (thermal or power)
    throttling_thermal: int
    power: str


@dataclass
class LoopCard:
    id: int
    name: str
    site: str
    liquid_class: str
    level: str
    level_word: str
    reasons: list[str]
    stale: str | None
    figures: list[tuple[str, str]]  # (label, value with unit) in reading order
    racks: list[ServedRack] = field(default_factory=list)


@dataclass
class CoolingPage:
    loops: list[LoopCard]
    as_of: str


def loop_figures(
    loop: CoolingLoop,
    summary: health.LoopSummary,
    reading: health.Reading,
    limit_c: float | None,
    now: float,
) -> list[tuple[str, str]]:
    """Each figure with its unit; an absent one says how long it has been quiet (or that
    the CDU does not report it: pressure is optional)."""

    def fresh(name: str) -> float | None:
        v = reading.fresh(name, now, health.STALE_AFTER_S)
        return None if v is None else float(v)

    def said(value: float | None, text: str, metric: str) -> str:
        if value is not None:
            return text
        age = reading.age_s(metric, now)
        return "not reported" if age is None else say("no_data_for", age=age_words(age))

    s = summary
    limit = "" if limit_c is None else f" (limit {limit_c:.0f} °C)"
    rated = (
        ""
        if s.flow_frac is None
        else f" ({100 * s.flow_frac:.0f} % of rated {loop.rated_flow_lpm:.0f} L/min)"
    )
    heat = fresh("heat_removed_kw")
    heat_text = (
        f"{heat:.1f} kW of {loop.capacity_kw:.0f} kW rated ({100 * heat / loop.capacity_kw:.0f} %)"
        if heat is not None
        else ""
    )
    running, failed = fresh("pumps_running"), s.pumps_failed
    pumps = ""
    if running is not None or failed is not None:
        ran = "?" if running is None else str(int(running))
        pumps = f"{ran} running, {'?' if failed is None else failed} failed"
    dp, sup_kpa, ret_kpa = fresh("dp_kpa"), fresh("supply_kpa"), fresh("return_kpa")
    pressure_parts = [
        f"{label} {v:.0f} kPa"
        for label, v in (("supply", sup_kpa), ("return", ret_kpa), ("differential", dp))
        if v is not None
    ]
    leak = (
        "none" if s.leak == 0 else None if s.leak is None else level_word(health.leak_level(s.leak))
    )
    return [
        ("Supply", said(s.supply_c, f"{s.supply_c or 0:.1f} °C{limit}", "supply_c")),
        ("Return", said(s.return_c, f"{s.return_c or 0:.1f} °C", "return_c")),
        ("ΔT", "–" if s.delta_c is None else f"{s.delta_c:.1f} °C"),
        ("Flow", said(s.flow_lpm, f"{s.flow_lpm or 0:.0f} L/min{rated}", "flow_lpm")),
        ("Pressure", " · ".join(pressure_parts) if pressure_parts else said(None, "", "dp_kpa")),
        ("Pumps", pumps or said(None, "", "pumps_running")),
        ("Leak", leak or said(None, "", "leak")),
        ("Heat removed", heat_text or said(None, "", "heat_removed_kw")),
    ]


def cooling_page(now: float, site_ids: Collection[int] | None = None) -> CoolingPage:
    """Every loop (site, then name) of the given sites (None: every site) with the racks
    it serves in floor order."""
    query = CoolingLoop.objects.select_related("site").order_by("site__name", "name")
    if site_ids is not None:
        query = query.filter(site_id__in=site_ids)
    loops = list(query)
    ids = [loop.id for loop in loops]
    views = loop_views(ids, now)
    served: dict[int, list[ServedRack]] = {}
    for rack_id, state in rack_states(_racks_on(ids), now).items():
        s = state.summary
        served.setdefault(state.info.loop_id or 0, []).append(
            ServedRack(
                id=rack_id,
                name=state.info.name,
                level=state.level.value,
                level_word=level_word(state.level),
                throttling=s.throttling_thermal + s.throttling_power,
                throttling_thermal=s.throttling_thermal,
                power=no_data_words(s.ts, now)
                if s.power_kw is None
                else power_words(s.power_kw * 1e3),
            )
        )
    cards = []
    for loop in loops:
        view = views[loop.id]
        summary, reading, limit = view.summary, view.reading, view.supply_limit_c
        cards.append(
            LoopCard(
                id=loop.id,
                name=loop.name,
                site=loop.site.name,
                liquid_class=loop.liquid_class,
                level=summary.level.value,
                level_word=level_word(summary.level),
                reasons=loop_reasons(view, now),  # shared with the live payload
                stale=no_data_words(summary.ts, now) if summary.stale else None,
                figures=loop_figures(loop, summary, reading, limit, now),
                racks=served.get(loop.id, []),
            )
        )
    return CoolingPage(cards, as_of(now))


def _racks_on(loop_ids: list[int]) -> list[int]:
    return list(Rack.objects.filter(loop_id__in=loop_ids).values_list("id", flat=True))
