"""The power & PUE page: per site the user may see, facility, IT and cooling power now,
the live PUE with its category, rolling PUE over 24 h, 30 d and 12 months from energy
(as far back as history is kept, with the span covered), and a chart of IT against
facility power. Live: static/dashboard/power.js takes each site's pushed strip figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from fleet import access
from fleet.health import STALE_AFTER_S
from fleet.models import Site
from fleet.read.pue import DAY_S, RollingPue, kept_s, power_series, rolling_pues
from fleet.read.site_summary import site_payloads
from fleet.words import pue_history_words, pue_words, span_words

# The chart's spans: (key, label, seconds, tier). The first is drawn first and extended
# by live pushes; the rest are a click away.
CHART_SPANS: tuple[tuple[str, str, int, str], ...] = (
    ("day", "last 24 h (1-minute means)", DAY_S, "1m"),
    ("month", "last 30 d (1-hour means)", 30 * DAY_S, "1h"),
)


@dataclass
class RollingRow:
    """One rolling window as the page says it."""

    pue: RollingPue

    @property
    def value(self) -> str:
        if self.pue.value is None:
            return "no data" if not self.pue.covered_s else "no PUE category reported"
        return pue_words(self.pue.value, self.pue.category, self.pue.category_words)

    @property
    def energy(self) -> str:
        if not self.pue.covered_s:
            return "–"
        return f"{mwh(self.pue.facility_kwh)} facility / {mwh(self.pue.it_kwh)} IT"

    @property
    def covered(self) -> str:
        if not self.pue.covered_s:
            return "no history"
        return f"{span_words(self.pue.covered_s)} of {span_words(self.pue.window_s)}"

    @property
    def status(self) -> str:
        p = self.pue
        kept = kept_s(p.tier)
        return pue_history_words(p.label, p.window_s, p.covered_s, kept, p.enough, p.annual)


@dataclass
class SitePower:
    id: int
    name: str
    now: dict[str, Any]  # fleet.read.site_summary's figures
    rolling: list[RollingRow]
    chart: dict[str, dict[str, Any]]  # per span key: power_series, with its window

    # The site payload's own words (fleet/read/site_summary.py), as the live push says them.
    @property
    def total_power(self) -> str:
        return str(self.now["total_power_words"])

    @property
    def it_power(self) -> str:
        return str(self.now["it_power_words"])

    @property
    def cooling_power(self) -> str:
        return str(self.now["cooling_power_words"])

    @property
    def cooling_source(self) -> str:
        return str(self.now["cooling_source_words"])

    @property
    def pue(self) -> str:
        return str(self.now["pue_words"])


def mwh(kwh: float) -> str:
    return f"{kwh / 1000:,.1f} MWh" if kwh >= 1000 else f"{kwh:,.1f} kWh"


def visible_sites(user: Any) -> list[tuple[int, str]]:
    sites = Site.objects.order_by("name")
    allowed = access.visible_site_ids(user)
    if allowed is not None:
        sites = sites.filter(pk__in=allowed)
    return list(sites.values_list("pk", "name"))


def power_page(sites: list[tuple[int, str]], now: float) -> list[SitePower]:
    figures = site_payloads([site_id for site_id, _ in sites], now)
    return [
        SitePower(
            site_id,
            name,
            figures[site_id],
            [RollingRow(r) for r in rolling_pues(site_id, now)],
            {
                key: power_series(site_id, now - span, now, tier)
                for key, _, span, tier in CHART_SPANS
            },
        )
        for site_id, name in sites
    ]


@login_required
@require_GET
def power_view(request: HttpRequest) -> HttpResponse:
    now = time.time()
    sites = power_page(visible_sites(request.user), now)
    context = {
        "sites": sites,
        "payload": {
            "now": now,
            "sites": {str(s.id): s.now for s in sites},
            "charts": {str(s.id): s.chart for s in sites},
            "stale_after_s": STALE_AFTER_S,
        },
        "chart_spans": [(key, label) for key, label, _, _ in CHART_SPANS],
        "kept_1m": span_words(int(kept_s("1m"))),
        "kept_1h": span_words(int(kept_s("1h"))),
    }
    return render(request, "dashboard/power.html", context)
