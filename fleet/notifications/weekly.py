"""The weekly report's Slack message: once a week per site, a short message with last week's
figures (fleet/read/weekly_report.py) and a link to its download, to every route of the
site that takes every owner's alerts (delivery.report_routes), else the SLACK_WEBHOOK_URL
route; through the delivery log like any alert (rate slot, 429s, retries).

The Celery task (tasks.weekly_report) looks every hour and posts a site's report of the
last week once: the delivery rows of a (site, week) are its thread, so a redelivered task,
a second beat or the next hour's tick finds them and sends nothing again; a week missed
whole (no worker for days) is not sent late.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from fleet.models import Site
from fleet.notifications.delivery import create_deliveries, report_routes
from fleet.notifications.models import Delivery
from fleet.notifications.notice import Notice, Where
from fleet.read.ledger_rules import LOST
from fleet.read.ledger_store import progress
from fleet.read.weekly_report import WeeklyReport, last_week, week_bounds, weekly_report

__all__ = ("SEND_AFTER_S", "report_notice", "report_thread", "report_url", "send_weekly_reports")

# An hour after the week ends, its last hour is rolled up (the hourly tier is written
# as each hour closes, within minutes).
SEND_AFTER_S = 3600.0
SHOWN_TEAMS = 3


def report_thread(site_id: int, week: str) -> str:
    return f"weekly-report:{site_id}:{week}"


def report_url(site_id: int, week: str) -> str:
    """The CSV download: absolute under FLEETWATCH_BASE_URL (Slack shows a button only
    for an absolute link), else relative."""
    base = str(getattr(settings, "FLEETWATCH_BASE_URL", "") or "").rstrip("/")
    query = urlencode({"site": site_id, "week": week, "format": "csv"})
    return f"{base}{reverse('weekly-report')}?{query}"


def _num(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _money(report: WeeklyReport) -> str:
    parts = []
    if report.cost is not None:
        parts.append(f"{_num(report.cost, 2)} {report.currency}".strip())
    if report.carbon_kg is not None:
        parts.append(f"{_num(report.carbon_kg)} kg CO2")
    return ", ".join(parts)


def report_notice(report: WeeklyReport) -> Notice:
    """ "Lon1, week 2026-W49: 7,210 of 8,064 GPU-hours held, 12 % of them idle; 5,210 kWh,
    1,042.00 EUR, 1,563 kg CO2", the three teams that used most, the allocation idle
    longest, the link."""
    held = report.held_hours
    idle_pct = 100.0 * report.idle_hours / held if held else 0.0
    title = (
        f"{report.site}, week {report.week}: {_num(held)} of {_num(report.gpu_hours)}"
        f" GPU-hours held, {idle_pct:.0f} % of them idle; {_num(report.kwh)} kWh"
    )
    money = _money(report)
    title += f", {money}" if money else ""
    teams = [t for t in report.teams if t.gpu_hours > 0][:SHOWN_TEAMS]
    lines = [f"{t.team}: {_num(t.gpu_hours)} GPU-hours, {_num(t.kwh)} kWh" for t in teams]
    if report.top_idle:
        top = report.top_idle[0]
        who = "/".join(p for p in (top.team, top.workload) if p)
        lines.append(f"idle longest: {who}, {_num(top.idle_hours, 1)} GPU-hours")
    url = report_url(report.site_id, report.week)
    if not url.startswith(("http://", "https://")):
        lines.append(f"download: {url}")  # no button for a relative link: said instead
    return Notice(
        kind="report",
        severity="info",
        title=title,
        where=Where(site=report.site),
        site_id=report.site_id,
        dashboard_url=url,
        thread=report_thread(report.site_id, report.week),
        summary="; ".join(lines),
    )


def send_weekly_reports(now: float, enqueue: Callable[[int], None]) -> list[Delivery]:
    """Post last week's report of every site that has not had it, once the week is over
    by SEND_AFTER_S; a site with no GPU-hours that week gets none. `enqueue` queues a
    delivery's task once its row is committed (tasks._enqueue_on_commit)."""
    year, week = last_week(now - SEND_AFTER_S)
    sent: list[Delivery] = []
    for site_id in Site.objects.order_by("pk").values_list("pk", flat=True):
        sent += _send_one(site_id, year, week, now, enqueue)
    return sent


def _send_one(
    site_id: int, year: int, week: int, now: float, enqueue: Callable[[int], None]
) -> list[Delivery]:
    with transaction.atomic():
        # One sender per site at a time (a row lock on PostgreSQL; SQLite's write lock).
        Site.objects.select_for_update().filter(pk=site_id).first()
        thread = report_thread(site_id, f"{year}-W{week:02d}")
        if Delivery.objects.filter(thread=thread).exists():
            return []
        routes = report_routes(site_id)
        if not routes:
            return []
        kept = progress(site_id)
        if kept is None or kept.closed_until < week_bounds(year, week)[1]:
            return []  # the ledger has not closed the week's last hours: the next tick

        report = weekly_report(site_id, year, week)
        if report.gpu_hours - report.states.get(LOST, 0.0) <= 0:
            return []  # no GPU reported that week: no message
        deliveries = create_deliveries(report_notice(report), routes)
        for delivery in deliveries:
            enqueue(delivery.pk)
    return deliveries
