"""The capacity page: per site the user may see, each rack's budget against its p95 and
p99 draw over 30 days, the kW stranded there and the GPUs that would fit in it, GPUs held
under their power limit by the budget, and racks whose budget is spent while their GPUs
idle (fleet/read/capacity.py decides all of it). `?format=csv` gives the same rows;
`?site=<id>` one site (404 for a site the user may not see, as the rack page does).
Its form asks whether a rack can take N more servers (dashboard/capacity_question.py), the
answer rendered here from `can_take`, as `GET /api/capacity/answer` sends it as JSON.
static/dashboard/capacity.js draws the bars from the figures and names sent here.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.capacity_question import NO_SUCH_RACK, answer_for, ask
from dashboard.power import visible_sites
from fleet.read.capacity import THRESHOLDS, WINDOW_S, RackCapacity, site_capacity, tier_for
from fleet.read.capacity_answer import CapacityQuestionError
from fleet.words import power_words, span_words

# The chart's bars: (payload key, name in the legend).
BARS: tuple[tuple[str, str], ...] = (
    ("budget_kw", "Budget (kW)"),
    ("p95_kw", "p95 draw (kW)"),
    ("p99_kw", "p99 draw (kW)"),
)
CSV_COLUMNS = (
    "site",
    "hall",
    "rack",
    "budget_kw",
    "p95_kw",
    "p99_kw",
    "stranded_kw",
    "gpu_model",
    "gpu_limit_w",
    "gpus_that_fit",
    "gpus_held_by_budget",
    "mean_gpu_util_pct",
    "budget_spent_while_idle",
    "history_covered_h",
    "power_source",
)
SPENT_WHILE_IDLE = "budget spent while its GPUs idle"


def kw(value: float | None) -> str:
    """A figure as the CSV and the chart have it: kW to one decimal, empty when none."""
    return "" if value is None else f"{value:.1f}"


@dataclass
class RackRow:
    """One rack as the table says it."""

    site: str
    r: RackCapacity

    def power(self, value: float | None) -> str:
        return power_words(None if value is None else float(kw(value)) * 1000)

    @property
    def budget(self) -> str:
        return self.power(self.r.budget_kw)

    @property
    def p95(self) -> str:
        return self.power(self.r.p95_kw)

    @property
    def p99(self) -> str:
        return self.power(self.r.p99_kw)

    @property
    def stranded(self) -> str:
        return self.power(self.r.stranded_kw)

    @property
    def fit(self) -> str:
        if self.r.gpus_that_fit is None:
            return "–" if self.r.stranded_kw is None else "no GPU power limit known"
        return f"{self.r.gpus_that_fit} × {self.r.gpu_model or 'GPU'} at {self.r.gpu_limit_w:.0f} W"

    @property
    def held(self) -> str:
        if self.r.held_by_budget:
            return f"{self.r.held_by_budget} of {self.r.gpus}"
        if self.r.capped_gpus:
            return f"none ({self.r.capped_gpus} capped, the rack is not near its budget)"
        return "none"

    @property
    def utilisation(self) -> str:
        u = self.r.mean_util_pct
        return "no data" if u is None else f"{u:.0f} %"

    @property
    def note(self) -> str:
        return SPENT_WHILE_IDLE if self.r.spent_while_idle else ""

    @property
    def covered(self) -> str:
        if not self.r.covered_s:
            return "no history"
        return f"{span_words(self.r.covered_s)} of {span_words(WINDOW_S)}, {self.r.source_words}"

    def csv_row(self) -> list[str]:
        r = self.r
        util = r.mean_util_pct
        return [
            self.site,
            r.hall,
            r.rack,
            kw(r.budget_kw),
            kw(r.p95_kw),
            kw(r.p99_kw),
            kw(r.stranded_kw),
            r.gpu_model,
            "" if r.gpu_limit_w is None else f"{r.gpu_limit_w:.0f}",
            "" if r.gpus_that_fit is None else str(r.gpus_that_fit),
            str(r.held_by_budget),
            "" if util is None else f"{util:.0f}",
            "yes" if r.spent_while_idle else "no",
            str(r.covered_s // 3600),
            r.source,
        ]


@dataclass
class SiteCapacity:
    id: int
    name: str
    rows: list[RackRow]

    @property
    def stranded(self) -> str:
        total = sum(r.r.stranded_kw or 0.0 for r in self.rows)
        return power_words(total * 1000)

    @property
    def chart(self) -> dict[str, Any]:
        data: dict[str, Any] = {"racks": [row.r.rack for row in self.rows]}
        for key, _ in BARS:
            data[key] = [None if v is None else float(v) for v in self._values(key)]
        return data

    def _values(self, key: str) -> list[str | None]:
        return [kw(getattr(row.r, key)) or None for row in self.rows]


def capacity_page(sites: list[tuple[int, str]], now: float) -> list[SiteCapacity]:
    return [
        SiteCapacity(site_id, name, [RackRow(name, r) for r in site_capacity(site_id, now)])
        for site_id, name in sites
    ]


def chosen_sites(request: HttpRequest) -> list[tuple[int, str]]:
    """The sites the user may see, or the one `?site=` names (404 when not one of them)."""
    sites = visible_sites(request.user)
    wanted = request.GET.get("site")
    if wanted is None:
        return sites
    chosen = [s for s in sites if str(s[0]) == wanted]
    if not chosen:
        raise Http404("no such site")
    return chosen


def as_csv(sites: list[SiteCapacity]) -> HttpResponse:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for site in sites:
        writer.writerows(row.csv_row() for row in site.rows)
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="capacity.csv"'
    return response


@login_required
@require_GET
def capacity_view(request: HttpRequest) -> HttpResponse:
    now = time.time()
    sites = capacity_page(chosen_sites(request), now)
    if request.GET.get("format") == "csv":
        return as_csv(sites)
    form = ask(request, now)
    context = {
        "form": form,
        "sites": sites,
        "payload": {
            "bars": [{"key": key, "name": name} for key, name in BARS],
            "charts": {str(s.id): s.chart for s in sites},
        },
        "window": span_words(WINDOW_S),
        "tier": "1-hour" if tier_for(WINDOW_S) == "1h" else "1-minute",
        "spent_pct": f"{THRESHOLDS.spent_fraction * 100:.0f}",
        "near_pct": f"{THRESHOLDS.near_fraction * 100:.0f}",
        "idle_pct": f"{THRESHOLDS.idle_util_pct:.0f}",
        "csv_url": "?format=csv" + (f"&site={sites[0].id}" if "site" in request.GET else ""),
    }
    return render(request, "dashboard/capacity.html", context, status=form.status)


@require_GET
def capacity_answer_api(request: HttpRequest) -> JsonResponse:
    """GET /api/capacity/answer?rack=<id>&servers=N&model=M[&watts=W&units=U] (JSON)."""
    if not request.user.is_authenticated:
        return JsonResponse({"error": "sign in first"}, status=401)
    try:
        answer = answer_for(request)
    except CapacityQuestionError as exc:
        return JsonResponse(
            {"error": str(exc), "field": exc.field, "reason": exc.reason}, status=400
        )
    if answer is None:
        return JsonResponse({"error": NO_SUCH_RACK}, status=404)
    return JsonResponse(answer.as_json())
