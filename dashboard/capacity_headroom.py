"""Headroom by rack (`/capacity/headroom/?site=<id>&model=M`, `&format=csv`): per rack of a
site the user may see, the room left on each capacity constraint, the binding one and how
many servers of the chosen model fit, the racks with least room first. The figures are
`fleet.read.headroom.site_headroom`'s, the ones `can_take` answers the capacity form with.

No `site`: the first site the user may see. No `model`: the site's most common model with a
known power and height. A site the user may not see is a 404; a model the site cannot be
judged for (unknown, or without power or height) a 400 with the reason on the page.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.capacity_question import figure, model_power_words
from dashboard.power import visible_sites
from fleet.read.capacity import WINDOW_S
from fleet.read.headroom import Headroom, KnownModel, RackHeadroom, known_models, site_headroom
from fleet.read.rack_room import CDU, FEEDS, POWER, SPACE, measured_server_ws
from fleet.words import span_words

# The table's and the CSV's constraint columns: (constraint, heading, CSV column).
COLUMNS: tuple[tuple[str, str, str], ...] = (
    (POWER, "Under budget at p99", "budget_room_kw"),
    (FEEDS, "Under feeds' N+1", "feeds_room_kw"),
    (CDU, "CDU heat room (with its other racks)", "cdu_room_kw"),
    (SPACE, "Free units", "free_u"),
)
CSV_COLUMNS = (
    "site",
    "hall",
    "rack",
    "p99_kw",
    *(column for _, _, column in COLUMNS),
    "binding",
    "model",
    "servers_that_fit",
)
NOT_JUDGED = "not judged"  # a rack without feeds, an air-cooled rack


@dataclass(frozen=True)
class HeadroomRow:
    """One rack as the table says it."""

    h: RackHeadroom

    @property
    def p99(self) -> str:
        return figure(self.h.p99_kw, "kW")

    @property
    def cells(self) -> list[tuple[str, str]]:
        """(figure, its details) per constraint column."""
        out = []
        for name, _, _ in COLUMNS:
            c = self.h.room(name)
            out.append((NOT_JUDGED, "") if c is None else (figure(c.room, c.unit), c.detail))
        return out

    @property
    def binding(self) -> str:
        b = self.h.binding
        return "–" if b is None or self.h.fits is None else b.name

    @property
    def fits(self) -> str:
        return "no measured draw" if self.h.fits is None else str(self.h.fits)

    def csv_row(self, site: str, model: str) -> list[str]:
        def number(name: str) -> str:
            c = self.h.room(name)
            if c is None or c.room is None:
                return ""
            return f"{c.room:.1f}" if c.unit == "kW" else f"{c.room:.0f}"

        h = self.h
        return [
            site,
            h.hall,
            h.rack,
            "" if h.p99_kw is None else f"{h.p99_kw:.1f}",
            *(number(name) for name, _, _ in COLUMNS),
            "" if h.fits is None or h.binding is None else h.binding.name,
            model,
            "" if h.fits is None else str(h.fits),
        ]


class ModelRefused(ValueError):
    """The model asked for cannot be judged at this site (the page's 400)."""


def usable(known: KnownModel) -> bool:
    return known.power is not None and known.units is not None


def chosen_model(models: list[KnownModel], wanted: str) -> KnownModel:
    if not wanted:
        first = next((k for k in models if usable(k)), None)
        if first is None:
            raise ModelRefused("no model with a known power and height: choose one")
        return first
    known = next((k for k in models if k.name == wanted), None)
    if known is None:
        raise ModelRefused(f"model {wanted!r} is not known at this site")
    if not usable(known):
        raise ModelRefused(
            f"model {wanted!r} has no measured or rated power or height here:"
            " ask the capacity form with its watts and units"
        )
    return known


def as_csv(site: str, headroom: Headroom) -> HttpResponse:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    writer.writerows(HeadroomRow(h).csv_row(site, headroom.model) for h in headroom.racks)
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="headroom.csv"'
    return response


@login_required
@require_GET
def headroom_view(request: HttpRequest) -> HttpResponse:
    sites = visible_sites(request.user)
    wanted = request.GET.get("site")
    chosen = sites[:1] if wanted is None else [s for s in sites if str(s[0]) == wanted]
    if not chosen:
        raise Http404("no such site")
    site_id, site_name = chosen[0]
    now = time.time()
    measured = measured_server_ws(site_id, now)
    models = known_models(site_id, now, measured=measured)
    context: dict[str, Any] = {
        "sites": sites,
        "site_id": site_id,
        "site": site_name,
        "models": [(k.name, model_power_words(k), usable(k)) for k in models],
        "window": span_words(WINDOW_S),
        "columns": [heading for _, heading, _ in COLUMNS],
        "not_judged": NOT_JUDGED,
    }
    try:
        model = chosen_model(models, request.GET.get("model", "").strip())
    except ModelRefused as exc:
        context["error"] = f"Cannot show headroom: {exc}."
        return render(request, "dashboard/capacity_headroom.html", context, status=400)
    assert model.power is not None and model.units is not None  # usable()
    headroom = site_headroom(site_id, model.name, model.power, model.units, now)
    if request.GET.get("format") == "csv":
        return as_csv(site_name, headroom)
    context.update(
        model=model.name,
        model_power=model_power_words(model),
        units=model.units,
        rows=[HeadroomRow(h) for h in headroom.racks],
        csv_url="?" + urlencode({"site": site_id, "model": model.name, "format": "csv"}),
    )
    return render(request, "dashboard/capacity_headroom.html", context)
