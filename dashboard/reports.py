"""The weekly report's download: `/reports/weekly/?site=<id>&week=YYYY-Www` shows a site's
week (fleet/read/weekly_report.py: GPU-hours by state, energy, cost and carbon per team,
the ten allocations idle longest) as a plain table, `&format=csv` as CSV, the link the
weekly Slack message carries. Without `week`: the last week that has ended. A site the
user may not see, or no such site, is a 404, as its racks are; a week that has not ended
yet, or is no ISO week, a 404 too.
"""

from __future__ import annotations

import csv
import io
import time

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from fleet.access import can_view_site
from fleet.models import Site
from fleet.read.weekly_report import (
    WeeklyReport,
    csv_rows,
    last_week,
    parse_week,
    week_bounds,
    week_name,
    weekly_report,
)


def _site(request: HttpRequest) -> Site:
    wanted = request.GET.get("site", "")
    site = Site.objects.filter(pk=int(wanted)).first() if wanted.isdigit() else None
    if site is None or not can_view_site(request.user, site.pk):
        raise Http404("no such site")
    return site


def _week(request: HttpRequest, now: float) -> tuple[int, int]:
    text = request.GET.get("week")
    if text is None:
        return last_week(now)
    week = parse_week(text)
    if week is None or week_bounds(*week)[1] > now:
        raise Http404("no such week, or it has not ended")
    return week


def as_csv(report: WeeklyReport) -> HttpResponse:
    out = io.StringIO()
    csv.writer(out).writerows(csv_rows(report))
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    name = f"fleetwatch-{report.site_id}-{report.week}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@login_required
@require_GET
def weekly_report_view(request: HttpRequest) -> HttpResponse:
    now = time.time()
    site = _site(request)
    year, week = _week(request, now)
    report = weekly_report(site.pk, year, week)
    if request.GET.get("format") == "csv":
        return as_csv(report)
    rows = csv_rows(report)
    context = {
        "report": report,
        "header": rows[0],
        "rows": rows[1:],
        "csv_url": f"?site={site.pk}&week={week_name(year, week)}&format=csv",
    }
    return render(request, "dashboard/weekly_report.html", context)
