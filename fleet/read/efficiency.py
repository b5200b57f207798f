"""The efficiency page's figures, from the energy ledger (fleet/read/ledger.py, docs/ledger.md):
a site's GPU-hours by state, energy, cost and carbon over a window, rolled up by hall, rack,
team (namespace or account) and job; and the reclaim list, the workloads holding GPUs that
are allocated but idle now.

The window's ledger is read from the stored hours and days (fleet/read/ledger_store.py);
here its per-node and per-job lines are summed, with one query for the racks of the site's
nodes, one for the workloads' owners and one for the open intervals on idle GPUs. "Idle
now" is computed from the last minutes of the 1-minute tier.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connections

from fleet.models import GpuAllocation, Node, Site, Workload
from fleet.models.workloads import AllocationSource, WorkloadKind
from fleet.read import ledger_rules as r
from fleet.read.ledger import (
    JobLedger,
    Ledger,
    Line,
    Price,
    charged_states,
    ledger,
    price,
    tier_for,
)
from fleet.read.ledger_idle_sql import idle_now_sql
from fleet.read.ledger_rules import DEFAULT_RULES, LedgerRules
from fleet.read.ledger_sql import Window
from fleet.read.ledger_store import progress, stored_ledger

DAY_S = 86_400
# The page's windows: (the `?window=` value, seconds), the first the default.
WINDOWS: tuple[tuple[str, int], ...] = (("24h", DAY_S), ("7d", 7 * DAY_S), ("30d", 30 * DAY_S))


@dataclass(frozen=True, slots=True)
class Total:
    """One hall's, rack's or team's GPU-hours and energy per state, and their price."""

    name: str
    parent: str  # the rack's hall; "" for halls and teams
    states: dict[str, Line]
    price: Price

    @property
    def total(self) -> Line:
        return sum(self.states.values(), Line())


@dataclass(frozen=True, slots=True)
class Job:
    """A workload's ledger with who owns it."""

    ledger: JobLedger
    kind: str  # the kind's words: "Slurm job", "Kubernetes pod"
    team: str  # namespace or account; "" when the workload names neither
    user: str


@dataclass(frozen=True, slots=True)
class Idle:
    """One reclaim-list row: a workload holding GPUs that are allocated and idle now, with
    its allocated-idle GPU-hours and their energy over the page's window."""

    workload_id: int
    kind: str
    key: str
    team: str
    user: str
    gpus_held: int  # GPUs its open scheduler intervals name
    idle_gpus: int  # … of them allocated and idle now
    since: float  # the earliest start of those intervals
    idle: Line  # its allocated_idle line over the window


@dataclass(frozen=True, slots=True)
class SiteEfficiency:
    site_id: int
    name: str
    ledger: Ledger
    halls: list[Total]
    racks: list[Total]
    teams: list[Total]
    jobs: list[Job]
    reclaim: list[Idle]
    kept: bool = True  # False: the stored ledger has nothing of this site yet

    @property
    def window(self) -> Window:
        return self.ledger.window

    @property
    def totals(self) -> Line:
        return sum(self.ledger.states.values(), Line())


def window_for(site_id: int, span_s: int, now: float, using: str = DEFAULT_DB_ALIAS) -> Window:
    """`span_s` of whole hours and, after them, the hour the stored ledger is filling, to
    the newest minute it has (a minute still filling is not counted)."""
    kept = progress(site_id, using)
    b = kept.open_until if kept is not None else int(now // 3600) * 3600
    return Window(site_id, b - b % 3600 - span_s, b, "1h")


def site_efficiency(
    site: Site,
    span_s: int,
    now: float,
    rules: LedgerRules = DEFAULT_RULES,
    using: str = DEFAULT_DB_ALIAS,
) -> SiteEfficiency:
    window = window_for(site.pk, span_s, now, using)
    kept = True
    if rules == DEFAULT_RULES:
        kept = progress(site.pk, using) is not None
        led = stored_ledger(window, using)
    else:  # other thresholds: computed from the tiers, not read
        tier = tier_for(window.a, window.b, now)
        led = ledger(Window(site.pk, window.a, window.b, tier), rules, using)
    halls, racks = _places(site, led, using)
    jobs = _owned(led.jobs, using)
    return SiteEfficiency(
        site.pk,
        site.name,
        led,
        halls,
        racks,
        _teams(site, jobs),
        sorted(jobs, key=lambda j: (-j.ledger.total.gpu_hours, j.ledger.key)),
        reclaim_list(site, now, {j.ledger.workload_id: j for j in jobs}, rules, using),
        kept,
    )


def _add(into: dict[str, Line], states: dict[str, Line]) -> None:
    for state, line in states.items():
        into[state] = into.get(state, Line()) + line


def _held_hours(states: dict[str, Line]) -> float:
    return sum(line.gpu_hours for s, line in states.items() if s in r.HELD_STATES)


def total_of(
    site: Site, name: str, parent: str, states: dict[str, Line], charged: Iterable[str] = r.STATES
) -> Total:
    """`states` with their price: the energy (and overhead) of the `charged` states — a
    place's all of them, a team's what its jobs pay for — and held GPU-hours at the site's
    rates."""
    kept = set(charged)
    paid = sum((line for s, line in states.items() if s in kept), Line())
    return Total(name, parent, states, price(site, paid, _held_hours(states)))


def _places(site: Site, led: Ledger, using: str) -> tuple[list[Total], list[Total]]:
    """Halls and racks: their nodes' lines summed (one query maps the nodes to racks)."""
    where = {
        node_id: (hall, rack)
        for node_id, hall, rack in Node.objects.using(using)
        .filter(rack__hall__site_id=site.pk)
        .values_list("pk", "rack__hall__name", "rack__name")
    }
    halls: dict[str, dict[str, Line]] = {}
    racks: dict[tuple[str, str], dict[str, Line]] = {}
    for node in led.nodes:
        hall, rack = where.get(node.node_id, ("", ""))
        _add(halls.setdefault(hall, {}), node.states)
        _add(racks.setdefault((hall, rack), {}), node.states)
    return (
        [total_of(site, hall, "", states) for hall, states in sorted(halls.items())],
        [total_of(site, rack, hall, states) for (hall, rack), states in sorted(racks.items())],
    )


def _owned(jobs: list[JobLedger], using: str) -> list[Job]:
    owners = (
        Workload.objects.using(using)
        .only("kind", "namespace", "account", "user")
        .in_bulk([j.workload_id for j in jobs])
    )
    return [_job(j, owners[j.workload_id]) for j in jobs]


def _job(j: JobLedger, wl: Workload) -> Job:
    return Job(j, _kind_words(j.kind), wl.namespace or wl.account, wl.user)


def _kind_words(kind: str) -> str:
    return str(WorkloadKind(kind).label) if kind in WorkloadKind.values else kind


def _teams(site: Site, jobs: Iterable[Job]) -> list[Total]:
    """Teams (namespace or account) by GPU-hours held, most first."""
    teams: dict[str, dict[str, Line]] = {}
    for job in jobs:
        _add(teams.setdefault(job.team, {}), job.ledger.states)
    charged = charged_states(site)
    totals = [total_of(site, team, "", states, charged) for team, states in teams.items()]
    return sorted(totals, key=lambda t: (-t.total.gpu_hours, t.name))


def idle_now(
    site_id: int, now: float, rules: LedgerRules = DEFAULT_RULES, using: str = DEFAULT_DB_ALIAS
) -> set[tuple[int, int]]:
    """(node, GPU) of the GPUs allocated and idle now: every one of the last `idle_minutes`
    rolled-up minutes idle (the ledger's test of a minute, fleet/read/ledger_sql.py
    `idle_reading`) under an open scheduler allocation, no process on the GPU, no memory
    held. One aggregate over those minutes of the held GPUs, not a ledger of them."""
    with connections[using].cursor() as cur:
        cur.execute("SELECT done_until FROM fw_rollup_state WHERE tier = '1m' AND kind = 'gpu'")
        row = cur.fetchone()
        b = int(now // 60) * 60 if row is None else min(int(now // 60) * 60, int(row[0]))
        cur.execute(idle_now_sql(site_id, b, rules))
        return {(int(node), int(gpu)) for node, gpu in cur.fetchall()}


def reclaim_list(
    site: Site,
    now: float,
    jobs: dict[int, Job],
    rules: LedgerRules = DEFAULT_RULES,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Idle]:
    """Workloads whose open scheduler intervals hold GPUs allocated and idle now, most idle
    GPU-hours in the window (`jobs`, the window's ledger) first."""
    idle = idle_now(site.pk, now, rules, using)
    if not idle:
        return []
    opened = GpuAllocation.objects.using(using).filter(
        site_id=site.pk, ended__isnull=True, source=AllocationSource.SCHEDULER
    )
    # (node, GPU) pairs, not intervals: a job on two MIG devices of a GPU holds one GPU
    on_idle: dict[int, dict[tuple[int, int], float]] = {}
    nodes = {node for node, _ in idle}
    for workload_id, node_id, gpu, started in opened.filter(node_id__in=nodes).values_list(
        "workload_id", "node_id", "gpu", "started"
    ):
        if (node_id, gpu) in idle:
            gpus = on_idle.setdefault(workload_id, {})
            gpus[(node_id, gpu)] = min(started, gpus.get((node_id, gpu), started))
    held: dict[int, set[tuple[int, int]]] = {}
    for workload_id, node_id, gpu in opened.filter(workload_id__in=list(on_idle)).values_list(
        "workload_id", "node_id", "gpu"
    ):
        held.setdefault(workload_id, set()).add((node_id, gpu))
    workloads = Workload.objects.using(using).in_bulk(list(on_idle))
    rows = [
        _idle_row(workloads[wid], jobs.get(wid), len(held[wid]), gpus)
        for wid, gpus in on_idle.items()
    ]
    return sorted(rows, key=lambda row: (-row.idle.gpu_hours, row.since, row.key))


def _idle_row(wl: Workload, job: Job | None, held: int, idle: dict[tuple[int, int], float]) -> Idle:
    line = job.ledger.states.get(r.ALLOCATED_IDLE, Line()) if job else Line()
    return Idle(
        wl.pk,
        _kind_words(wl.kind),
        wl.key,
        wl.namespace or wl.account,
        wl.user,
        held,
        len(idle),
        min(idle.values()),
        line,
    )
