"""The efficiency page: per site the user may see, over the last 24 h, 7 d or 30 d
(`?window=`), GPU-hours by ledger state, energy, facility overhead, cost and carbon by site,
hall, rack, team and job, a stacked bar of GPU-hours by state per team (per rack where no
workload ran), and the reclaim list: workloads holding GPUs that are allocated but idle
now. fleet/read/efficiency.py reads it all from the energy ledger (docs/ledger.md).
`?format=csv` gives the per-job table, `?format=csv&table=reclaim` the reclaim list;
`?site=<id>` one site (404 for a site the user may not see, as the capacity page does).
static/dashboard/efficiency.js draws the bars from the figures, names and colours sent here.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.capacity import chosen_sites
from fleet.models import Site
from fleet.read import ledger_rules as r
from fleet.read.efficiency import (
    WINDOWS,
    Idle,
    Job,
    SiteEfficiency,
    Total,
    site_efficiency,
    total_of,
)
from fleet.read.ledger import Line, Price
from fleet.read.ledger_rules import DEFAULT_RULES
from fleet.words import (
    efficiency_words,
    span_words,
    state_word,
    utc_minute,
)

clock = time.time  # tests pass the moment by hand

# Each state's colour in the chart and the table's key: busy green, idle amber, memory held
# orange, stalled red, the pool's greys. The words beside them say the same (fleet/words.py).
STATE_COLOURS: dict[str, str] = {
    r.BUSY: "#2e9e5b",
    r.ALLOCATED_IDLE: "#e0a31a",
    r.IDLE_HELD_MEMORY: "#d9661f",
    r.STALLED: "#c8372d",
    r.UNALLOCATED: "#8a94a6",
    r.LOST: "#4d5566",
}
JOBS_SHOWN = 100  # rows of the job table and the reclaim list on the page; the CSV has all

JOB_CSV = (
    "site",
    "kind",
    "key",
    "team",
    "user",
    "split",
    *(f"{state}_gpu_h" for state in r.HELD_STATES),
    "gpu_h",
    "energy_kwh",
    "facility_kwh",
    "cost",
    "currency",
    "carbon_kg",
)
RECLAIM_CSV = (
    "site",
    "kind",
    "key",
    "team",
    "user",
    "gpus_held",
    "idle_gpus",
    "since_utc",
    "idle_gpu_h",
    "idle_energy_kwh",
    "idle_facility_kwh",
)


def figure(value: float) -> str:
    """A figure as the page shows it: two decimals, thousands apart."""
    return f"{value:,.2f}"


def plain(value: float) -> str:
    """The same figure as the CSV has it."""
    return f"{value:.2f}"


def cost_words(p: Price) -> str:
    return "–" if p.cost is None else f"{figure(p.cost)} {p.currency}"


def carbon_words(p: Price) -> str:
    return "–" if p.carbon_kg is None else figure(p.carbon_kg)


def figures(states: dict[str, Line], p: Price, columns: Iterable[str]) -> list[str]:
    """GPU-hours in each state of `columns`, energy (GPU + node), facility overhead (kWh),
    cost and carbon, as the tables show them."""
    line = sum(states.values(), Line())
    hours = [figure(states.get(state, Line()).gpu_hours) for state in columns]
    energy = line.energy
    return [*hours, figure(energy.it_kwh), figure(energy.overhead_kwh), cost_words(p),
            carbon_words(p)]  # fmt: skip


@dataclass
class Table:
    """A table of the page: each row's names, then its figures."""

    caption: str
    names: list[str]  # the columns that name a row
    states: tuple[str, ...]
    rows: list[tuple[list[str], list[str]]]
    note: str = ""

    @property
    def head(self) -> list[str]:
        return [state_word(s) for s in self.states]

    @property
    def width(self) -> int:
        return len(self.names) + len(self.states) + 4


def place_table(caption: str, names: list[str], totals: Iterable[Total], nested: bool) -> Table:
    rows = [
        ([t.name, t.parent] if nested else [t.name], figures(t.states, t.price, r.STATES))
        for t in totals
    ]
    return Table(caption, names, r.STATES, rows)


def team_name(team: str) -> str:
    return team or efficiency_words("no_team")


def job_table(jobs: list[Job]) -> Table:
    rows = [
        ([f"{j.kind} {j.ledger.key}", team_name(j.team), j.user or "–", j.ledger.split],
         figures(j.ledger.states, j.ledger.price, r.HELD_STATES))
        for j in jobs[:JOBS_SHOWN]
    ]  # fmt: skip
    note = ""
    if len(jobs) > JOBS_SHOWN:
        note = efficiency_words("top_of", shown=JOBS_SHOWN, count=len(jobs))
    return Table("By job", ["Job", "Team", "User", "Split"], r.HELD_STATES, rows, note)


@dataclass
class SiteView:
    """One site's section of the page."""

    site: Site
    e: SiteEfficiency
    span_s: int

    @property
    def window(self) -> str:
        if not self.e.kept:
            return efficiency_words("not_kept")
        w = self.e.window
        span = span_words(self.span_s)
        return efficiency_words("window", span=span, start=utc_minute(w.a), end=utc_minute(w.b))

    @property
    def site_total(self) -> Total:
        """Its GPUs' lines, priced as a hall's are (`Ledger.price` adds the energy of nodes
        whose GPUs sent nothing, which no column shows)."""
        return total_of(self.site, self.e.name, "", self.e.ledger.states)

    @property
    def tables(self) -> list[Table]:
        e = self.e
        teams = [([team_name(t.name)], figures(t.states, t.price, r.HELD_STATES)) for t in e.teams]
        return [
            Table("By team", ["Team"], r.HELD_STATES, teams),
            place_table("By hall", ["Hall"], e.halls, nested=False),
            place_table("By rack", ["Rack", "Hall"], e.racks, nested=True),
            job_table(e.jobs),
        ]

    @property
    def reclaim(self) -> list[dict[str, str]]:
        return [reclaim_row(row) for row in self.e.reclaim[:JOBS_SHOWN]]

    @property
    def reclaim_note(self) -> str:
        count = len(self.e.reclaim)
        if count <= JOBS_SHOWN:
            return ""
        return efficiency_words("top_of", shown=JOBS_SHOWN, count=count)

    @property
    def metered(self) -> str:
        led = self.e.ledger
        error = led.reconcile_error_pct
        said = "–" if error is None else f"{error:+.1f} %"
        return efficiency_words(
            "metered", charged=figure(led.total_kwh), metered=figure(led.metered_facility_kwh),
            error=said,
        )  # fmt: skip

    @property
    def chart(self) -> dict[str, Any]:
        e = self.e
        if e.teams:
            names = [team_name(t.name) for t in e.teams]
            states, groups = r.HELD_STATES, [t.states for t in e.teams]
            title = efficiency_words("by_team")
        else:
            names = [t.name for t in e.racks]
            states, groups = r.STATES, [t.states for t in e.racks]
            title = efficiency_words("by_rack")
        hours = {s: [round(g.get(s, Line()).gpu_hours, 2) for g in groups] for s in states}
        return {"title": title, "names": names, "states": list(states), "hours": hours}


def reclaim_row(row: Idle) -> dict[str, str]:
    return {
        "job": f"{row.kind} {row.key}",
        "team": team_name(row.team),
        "user": row.user or "–",
        "gpus": efficiency_words("idle_gpus", idle=row.idle_gpus, held=row.gpus_held),
        "since": utc_minute(row.since),
        "hours": figure(row.idle.gpu_hours),
        "energy": figure(row.idle.energy.it_kwh),
        "facility": figure(row.idle.energy.overhead_kwh),
    }


def chosen_span(request: HttpRequest) -> tuple[str, int]:
    wanted = request.GET.get("window", WINDOWS[0][0])
    for key, span in WINDOWS:
        if key == wanted:
            return key, span
    raise Http404("no such window")


def efficiency_page(sites: list[tuple[int, str]], span_s: int, now: float) -> list[SiteView]:
    rates = Site.objects.in_bulk([site_id for site_id, _ in sites])
    return [
        SiteView(rates[site_id], site_efficiency(rates[site_id], span_s, now), span_s)
        for site_id, _ in sites
    ]


def job_csv_rows(view: SiteView) -> Iterable[list[str]]:
    for j in view.e.jobs:
        led, p = j.ledger, j.ledger.price
        line = led.total
        hours = [plain(led.states.get(s, Line()).gpu_hours) for s in r.HELD_STATES]
        yield [
            view.e.name, j.kind, led.key, j.team, j.user, led.split, *hours,
            plain(line.gpu_hours), plain(line.energy.it_kwh), plain(line.energy.overhead_kwh),
            "" if p.cost is None else plain(p.cost), p.currency,
            "" if p.carbon_kg is None else plain(p.carbon_kg),
        ]  # fmt: skip


def reclaim_csv_rows(view: SiteView) -> Iterable[list[str]]:
    for row in view.e.reclaim:
        idle = row.idle
        yield [
            view.e.name, row.kind, row.key, row.team, row.user, str(row.gpus_held),
            str(row.idle_gpus), utc_minute(row.since), plain(idle.gpu_hours),
            plain(idle.energy.it_kwh), plain(idle.energy.overhead_kwh),
        ]  # fmt: skip


def as_csv(sites: list[SiteView], table: str | None) -> HttpResponse:
    if table not in (None, "jobs", "reclaim"):
        raise Http404("no such table")
    reclaim = table == "reclaim"
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(RECLAIM_CSV if reclaim else JOB_CSV)
    for view in sites:
        writer.writerows(reclaim_csv_rows(view) if reclaim else job_csv_rows(view))
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    name = "efficiency-reclaim.csv" if reclaim else "efficiency-jobs.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def links(request: HttpRequest, key: str) -> dict[str, Any]:
    """The window chooser's and the CSV links' URLs, keeping `?site=`."""
    site = f"&site={request.GET['site']}" if "site" in request.GET else ""
    return {
        "windows": [
            {"key": k, "label": span_words(span), "url": f"?window={k}{site}", "chosen": k == key}
            for k, span in WINDOWS
        ],
        "csv_url": f"?window={key}&format=csv{site}",
        "reclaim_csv_url": f"?window={key}&format=csv&table=reclaim{site}",
    }


@login_required
@require_GET
def efficiency_view(request: HttpRequest) -> HttpResponse:
    key, span = chosen_span(request)
    sites = efficiency_page(chosen_sites(request), span, clock())
    if request.GET.get("format") == "csv":
        return as_csv(sites, request.GET.get("table"))
    states = [{"key": s, "name": state_word(s), "colour": STATE_COLOURS[s]} for s in r.STATES]
    context = {
        "sites": sites,
        "states": states,
        "span": span_words(span),
        "idle_minutes": DEFAULT_RULES.idle_minutes,
        "by_site": place_table("By site", ["Site"], [v.site_total for v in sites], nested=False),
        "payload": {
            "states": states,
            "axis": efficiency_words("gpu_hours"),
            "charts": {str(v.e.site_id): v.chart for v in sites},
        },
        **links(request, key),
    }
    return render(request, "dashboard/efficiency.html", context)
