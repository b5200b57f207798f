"""The weekly report of a site: last ISO week's GPU-hours by state, energy, cost and carbon
per team, and the ten allocations that held GPUs idle longest, all read from the energy
ledger of that week as stored (fleet.read.ledger_store.stored_ledger), so its figures are the
efficiency page's.

Weeks are ISO weeks in UTC, Monday 00:00 to Monday 00:00: the ledger's buckets are UTC
minutes and hours, and a site's local midnight would cut a bucket where its offset is not
whole hours; "2026-W49" then names the same seven days everywhere (the download's URL,
the Slack message, the CSV).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS

from fleet.models import Site, Workload
from fleet.read import ledger_rules as r
from fleet.read.ledger import JobLedger, Line
from fleet.read.ledger_sql import Window
from fleet.read.ledger_store import stored_ledger
from fleet.read.teams import NO_TEAM, team_of, workload_name

__all__ = (
    "CSV_HEADER",
    "IDLE_STATES",
    "POOL",
    "TOP_IDLE",
    "IdleAllocation",
    "TeamLine",
    "WeeklyReport",
    "csv_rows",
    "last_week",
    "parse_week",
    "week_bounds",
    "week_name",
    "weekly_report",
)

WEEK_S = 7 * 86400
TOP_IDLE = 10
IDLE_STATES = r.IDLE_STATES
POOL = "(pool)"  # the report's name for GPU time nobody held: unallocated, lost or down
_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")


def parse_week(text: str) -> tuple[int, int] | None:
    """ "2026-W49" → (2026, 49); None when it is no ISO week."""
    found = _WEEK.match(text)
    if found is None:
        return None
    year, week = int(found.group(1)), int(found.group(2))
    try:
        dt.date.fromisocalendar(year, week, 1)
    except ValueError:
        return None
    return year, week


def week_bounds(year: int, week: int) -> tuple[int, int]:
    """The week's [Monday 00:00, next Monday 00:00) in UTC, epoch seconds."""
    monday = dt.date.fromisocalendar(year, week, 1)
    a = int(dt.datetime(monday.year, monday.month, monday.day, tzinfo=dt.UTC).timestamp())
    return a, a + WEEK_S


def week_name(year: int, week: int) -> str:
    return f"{year}-W{week:02d}"


def last_week(now: float) -> tuple[int, int]:
    """The last ISO week that has ended by `now` (UTC)."""
    day = dt.datetime.fromtimestamp(now, tz=dt.UTC).date() - dt.timedelta(days=7)
    year, week, _ = day.isocalendar()
    return year, week


@dataclass(frozen=True, slots=True)
class HeldHours:
    """GPU-hours per ledger state, the energy they took and the part of it used idle."""

    hours: dict[str, float]
    kwh: float
    idle_kwh: float

    @property
    def gpu_hours(self) -> float:
        return sum(self.hours.values())

    @property
    def idle_hours(self) -> float:
        return sum(self.hours.get(s, 0.0) for s in IDLE_STATES)


@dataclass(frozen=True, slots=True)
class TeamLine(HeldHours):
    """A team's week (or the pool's): GPU-hours per state, energy with its share of the
    node and the facility, cost and carbon at the site's rates (None without a rate)."""

    team: str
    cost: float | None
    carbon_kg: float | None


@dataclass(frozen=True, slots=True)
class IdleAllocation(HeldHours):
    """A workload that held GPUs doing nothing: its GPU-hours per state, its energy and the
    part of it its GPUs used idle."""

    team: str
    user: str
    workload: str


@dataclass(frozen=True, slots=True)
class WeeklyReport:
    site_id: int
    site: str
    week: str
    a: int
    b: int
    currency: str
    states: dict[str, float]  # the site's GPU-hours per state
    kwh: float  # everything charged, overhead and the pool included (the ledger's total)
    cost: float | None
    carbon_kg: float | None
    teams: list[TeamLine] = field(default_factory=list)  # most energy first; the pool last
    top_idle: list[IdleAllocation] = field(default_factory=list)

    @property
    def gpu_hours(self) -> float:
        return sum(self.states.values())

    @property
    def held_hours(self) -> float:
        return sum(self.states.get(s, 0.0) for s in r.HELD_STATES)

    @property
    def idle_hours(self) -> float:
        return sum(self.states.get(s, 0.0) for s in IDLE_STATES)


def weekly_report(
    site_id: int, year: int, week: int, using: str = DEFAULT_DB_ALIAS
) -> WeeklyReport:
    """The report of ISO week `year`-W`week` at site `site_id` (see the module's docstring)."""
    a, b = week_bounds(year, week)
    site = Site.objects.using(using).get(pk=site_id)
    led = stored_ledger(Window(site_id, a, b), using)
    workloads = Workload.objects.using(using).in_bulk([j.workload_id for j in led.jobs])
    teams = _teams(led.jobs, workloads)
    pool_lines = [led.states.get(s, Line()) for s in (r.UNALLOCATED, r.LOST)]
    pool = TeamLine(
        team=POOL,
        hours={s: led.states[s].gpu_hours for s in (r.UNALLOCATED, r.LOST) if s in led.states},
        kwh=sum((line.energy.total_kwh for line in pool_lines), led.nodes_without_gpus.total_kwh),
        idle_kwh=0.0,
        cost=None,
        carbon_kg=None,
    )
    return WeeklyReport(
        site_id=site_id,
        site=site.name,
        week=week_name(year, week),
        a=a,
        b=b,
        currency=site.currency,
        states={s: line.gpu_hours for s, line in led.states.items()},
        kwh=led.total_kwh,
        cost=led.price.cost,
        carbon_kg=led.price.carbon_kg,
        teams=[*teams, pool],
        top_idle=_top_idle(led.jobs, workloads),
    )


def _team(job: JobLedger, workloads: dict[int, Workload]) -> str:
    wl = workloads.get(job.workload_id)
    return (team_of(wl.namespace, wl.account) if wl is not None else "") or NO_TEAM


def _teams(jobs: Iterable[JobLedger], workloads: dict[int, Workload]) -> list[TeamLine]:
    by_team: dict[str, list[JobLedger]] = {}
    for job in jobs:
        by_team.setdefault(_team(job, workloads), []).append(job)
    lines = [_team_line(team, members) for team, members in by_team.items()]
    return sorted(lines, key=lambda t: (-t.kwh, t.team))


def _team_line(team: str, jobs: list[JobLedger]) -> TeamLine:
    return TeamLine(
        team=team,
        hours=_hours(jobs),
        kwh=sum(job.total.energy.total_kwh for job in jobs),
        idle_kwh=sum(_idle_kwh(job) for job in jobs),
        cost=_sum_or_none(job.price.cost for job in jobs),
        carbon_kg=_sum_or_none(job.price.carbon_kg for job in jobs),
    )


def _hours(jobs: Iterable[JobLedger]) -> dict[str, float]:
    hours: dict[str, float] = {}
    for job in jobs:
        for state, line in job.states.items():
            hours[state] = hours.get(state, 0.0) + line.gpu_hours
    return hours


def _idle_kwh(job: JobLedger) -> float:
    return sum(job.states[s].energy.total_kwh for s in IDLE_STATES if s in job.states)


def _sum_or_none(values: Iterable[float | None]) -> float | None:
    """The sum, None when no part has a figure (the site has no such rate)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _top_idle(jobs: Iterable[JobLedger], workloads: dict[int, Workload]) -> list[IdleAllocation]:
    rows = []
    for job in jobs:
        wl = workloads.get(job.workload_id)
        row = IdleAllocation(
            team=_team(job, workloads),
            user="" if wl is None else wl.user,
            workload=job.key if wl is None else workload_name(wl.kind, wl.key, wl.pod, wl.job),
            hours=_hours([job]),
            kwh=job.total.energy.total_kwh,
            idle_kwh=_idle_kwh(job),
        )
        if row.idle_hours > 0:
            rows.append(row)
    rows.sort(key=lambda i: (-i.idle_hours, i.team, i.workload))
    return rows[:TOP_IDLE]


def _fig(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


CSV_HEADER: tuple[str, ...] = (
    "section",
    "team",
    "user",
    "workload",
    *(f"{s}_gpu_hours" for s in r.STATES),
    "gpu_hours",
    "idle_gpu_hours",
    "kwh",
    "idle_kwh",
    "cost",
    "currency",
    "carbon_kg",
)


def csv_rows(report: WeeklyReport) -> list[list[str]]:
    """The report as one table: a row per team (`team`, the pool last), then one per
    allocation of the ten idle longest (`idle`); figures to two decimals, kWh to three."""
    rows = [list(CSV_HEADER)]
    for t in report.teams:
        money = [_fig(t.cost), report.currency if t.cost is not None else "", _fig(t.carbon_kg, 3)]
        rows.append(["team", t.team, "", "", *_figures(t), *money])
    for i in report.top_idle:
        rows.append(["idle", i.team, i.user, i.workload, *_figures(i), "", "", ""])
    return rows


def _figures(line: TeamLine | IdleAllocation) -> list[str]:
    return [
        *(_fig(line.hours.get(s, 0.0)) for s in r.STATES),
        _fig(line.gpu_hours),
        _fig(line.idle_hours),
        _fig(line.kwh, 3),
        _fig(line.idle_kwh, 3),
    ]
