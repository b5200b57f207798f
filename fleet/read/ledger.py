"""The energy ledger of a site over a window: each GPU's energy per state, each job's energy
with its share of the node and of the facility, the pool's, carbon and cost, and how well
it all adds up to the facility meters (docs/ledger.md).

The heavy part is SQL (fleet/read/ledger_sql.py): the database folds every GPU-bucket and
answers a few rows per GPU and state, and per workload and state; Python only names them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from fleet.models import GPU, Site, Workload
from fleet.read import ledger_rules as r
from fleet.read.ledger_rules import DEFAULT_RULES, LedgerRules
from fleet.read.ledger_sql import (
    Window,
    metered_sql,
    nodes_without_gpus_sql,
    per_gpu_sql,
    per_state_sql,
    per_workload_sql,
)
from fleet.storage import retention

J_PER_KWH = 3.6e6
EXCLUSIVE = "exclusive"  # one workload held the GPU in each of its buckets
EVEN = "even"  # shared buckets split evenly (per-process SM use is not stored)


@dataclass(frozen=True, slots=True)
class Energy:
    """kWh: the GPUs' own, their share of the node's non-GPU power, the facility overhead
    on both ((PUE − 1) × IT energy)."""

    gpu_kwh: float = 0.0
    node_kwh: float = 0.0
    overhead_kwh: float = 0.0

    @property
    def it_kwh(self) -> float:
        return self.gpu_kwh + self.node_kwh

    @property
    def total_kwh(self) -> float:
        return self.it_kwh + self.overhead_kwh

    def __add__(self, other: Energy) -> Energy:
        return Energy(
            self.gpu_kwh + other.gpu_kwh,
            self.node_kwh + other.node_kwh,
            self.overhead_kwh + other.overhead_kwh,
        )


@dataclass(frozen=True, slots=True)
class Line:
    """One state's share of a GPU, a job or the site: GPU-hours, energy, and how much of it
    is estimated from power (no energy counter) or crossed a counter reset."""

    gpu_hours: float = 0.0
    energy: Energy = field(default_factory=Energy)
    estimated_hours: float = 0.0
    resets: int = 0
    hours_without_pue: float = 0.0

    def __add__(self, other: Line) -> Line:
        return Line(
            self.gpu_hours + other.gpu_hours,
            self.energy + other.energy,
            self.estimated_hours + other.estimated_hours,
            self.resets + other.resets,
            self.hours_without_pue + other.hours_without_pue,
        )


def _total(lines: Iterable[Line]) -> Line:
    return sum(lines, Line())


@dataclass(frozen=True, slots=True)
class Price:
    """Carbon (kg CO2) and cost of an energy and GPU-hours at a site's rates; None where the
    site has no rate."""

    carbon_kg: float | None
    cost: float | None
    currency: str


def price(site: Site, energy_kwh: float, gpu_hours: float) -> Price:
    carbon = None if site.grid_gco2_per_kwh is None else energy_kwh * site.grid_gco2_per_kwh / 1e3
    parts = []
    if site.tariff_per_kwh is not None:
        parts.append(energy_kwh * site.tariff_per_kwh)
    if site.gpu_hour_price is not None:
        parts.append(gpu_hours * site.gpu_hour_price)
    return Price(carbon, sum(parts) if parts else None, site.currency)


@dataclass(frozen=True, slots=True)
class GpuLedger:
    node_id: int
    gpu: int
    states: dict[str, Line]

    @property
    def total(self) -> Line:
        return _total(self.states.values())


@dataclass(frozen=True, slots=True)
class JobLedger:
    """A workload's energy: what its GPUs used while it held them, whatever their state."""

    workload_id: int
    kind: str
    key: str
    owner: str
    split: str  # EXCLUSIVE or EVEN
    states: dict[str, Line]
    price: Price

    @property
    def total(self) -> Line:
        return _total(self.states.values())


@dataclass(frozen=True, slots=True)
class Ledger:
    window: Window
    rules: LedgerRules
    states: dict[str, Line]  # the site's GPU-hours and energy per state
    gpus: list[GpuLedger]
    jobs: list[JobLedger]
    nodes_without_gpus: Energy  # node energy in buckets with no GPU row: the pool's
    metered_facility_kwh: float
    metered_it_kwh: float
    price: Price  # the whole ledger's

    @property
    def attributed(self) -> Line:
        """Held GPU-buckets: the jobs' (idle ones included: charged to their owners)."""
        return _total(self.states.get(s, Line()) for s in r.HELD_STATES)

    @property
    def pool(self) -> Energy:
        """Energy no job holds: unallocated and lost GPUs, nodes whose GPUs sent nothing."""
        lines = (self.states.get(s, Line()) for s in (r.UNALLOCATED, r.LOST))
        return _total(lines).energy + self.nodes_without_gpus

    @property
    def total_kwh(self) -> float:
        return self.attributed.energy.total_kwh + self.pool.total_kwh

    @property
    def reconcile_error_pct(self) -> float | None:
        """(ledger − metered facility energy) / metered, in %: how far the GPUs' counters and
        the nodes' meters, with the facility overhead, are from the utility meters."""
        if self.metered_facility_kwh <= 0:
            return None
        return 100.0 * (self.total_kwh - self.metered_facility_kwh) / self.metered_facility_kwh

    @property
    def unmetered_it_kwh(self) -> float:
        """IT energy the facility meter saw and no node or GPU reported (switches, storage,
        nodes without a power reading)."""
        return self.metered_it_kwh - (self.attributed.energy.it_kwh + self.pool.it_kwh)


def tier_for(a: float, b: float, now: float) -> str:
    """The 1-minute tier while it still holds the window, else hours: a 30-day page reads
    720 rows per GPU instead of 43,200, and its states are then decided per hour."""
    return "1m" if now - a <= retention.kept_s("1m", "gpu") else "1h"


def ledger(
    window: Window, rules: LedgerRules = DEFAULT_RULES, using: str = DEFAULT_DB_ALIAS
) -> Ledger:
    """The ledger of `window` (see the module's docstring)."""
    site = Site.objects.using(using).get(pk=window.site_id)
    step_h = window.step / 3600
    gpus = _gpus(window, _rows(using, per_gpu_sql(window, rules, _vendor(using))), step_h, using)
    states: dict[str, Line] = {}
    for g in gpus:
        for state, line in g.states.items():
            states[state] = states.get(state, Line()) + line
    jobs = _jobs(site, _rows(using, per_workload_sql(window, rules, _vendor(using))), step_h, using)
    [(node_j, node_over_j)] = _rows(using, nodes_without_gpus_sql(window, _vendor(using)))
    metered_j, metered_it_j, _ = _rows(using, metered_sql(window))[0]
    led = Ledger(
        window=window,
        rules=rules,
        states=states,
        gpus=gpus,
        jobs=jobs,
        nodes_without_gpus=Energy(0.0, _kwh(node_j), _kwh(node_over_j)),
        metered_facility_kwh=_kwh(metered_j),
        metered_it_kwh=_kwh(metered_it_j),
        price=Price(None, None, site.currency),
    )
    held_hours = led.attributed.gpu_hours
    return _with_price(led, price(site, led.total_kwh, held_hours))


def state_totals(
    window: Window, rules: LedgerRules = DEFAULT_RULES, using: str = DEFAULT_DB_ALIAS
) -> dict[str, Line]:
    """The efficiency page's aggregate: the site's GPU-hours and energy per state, one
    statement (GPUs with no row at all are not counted as lost here; `ledger` counts them)."""
    step_h = window.step / 3600
    rows = _rows(using, per_state_sql(window, rules, _vendor(using)))
    return {row[0]: _line(row[1:], step_h) for row in rows}


def _with_price(led: Ledger, p: Price) -> Ledger:
    return Ledger(
        led.window,
        led.rules,
        led.states,
        led.gpus,
        led.jobs,
        led.nodes_without_gpus,
        led.metered_facility_kwh,
        led.metered_it_kwh,
        p,
    )


def _vendor(using: str) -> str:
    """The engine the statements are shaped for (fleet/read/ledger_sql.py: a hint differs)."""
    return str(connections[using].vendor)


def _rows(using: str, sql: str) -> list[tuple[Any, ...]]:
    with connections[using].cursor() as cur:
        cur.execute(sql)
        return [tuple(row) for row in cur.fetchall()]


def _kwh(joules: Any) -> float:
    return float(joules or 0.0) / J_PER_KWH


def _line(row: Sequence[Any], step_h: float) -> Line:
    """From `buckets, gpu J, node J, overhead J, estimated, resets, without PUE`."""
    buckets, gpu_j, node_j, over_j, estimated, resets, no_pue = row[:7]
    return Line(
        gpu_hours=float(buckets) * step_h,
        energy=Energy(_kwh(gpu_j), _kwh(node_j), _kwh(over_j)),
        estimated_hours=float(estimated or 0) * step_h,
        resets=int(resets or 0),
        hours_without_pue=float(no_pue or 0) * step_h,
    )


def _gpus(w: Window, rows: list[tuple[Any, ...]], step_h: float, using: str) -> list[GpuLedger]:
    """Each GPU's lines; the buckets a GPU has no row for (inventory GPUs that sent nothing
    included) are lost or down."""
    states: dict[tuple[int, int], dict[str, Line]] = {}
    for node_id, gpu, state, *sums in rows:
        states.setdefault((int(node_id), int(gpu)), {})[str(state)] = _line(sums, step_h)
    known = GPU.objects.using(using).filter(node__rack__hall__site_id=w.site_id)
    if w.node_ids is not None:
        known = known.filter(node_id__in=w.node_ids)
    for node_id, index in known.values_list("node_id", "index"):
        states.setdefault((node_id, index), {})
    buckets = (w.b - w.a) // w.step
    for lines in states.values():
        missing = buckets - round(sum(line.gpu_hours for line in lines.values()) / step_h)
        if missing > 0:
            lines[r.LOST] = lines.get(r.LOST, Line()) + Line(gpu_hours=missing * step_h)
    return [GpuLedger(n, g, lines) for (n, g), lines in sorted(states.items())]


def _jobs(site: Site, rows: list[tuple[Any, ...]], step_h: float, using: str) -> list[JobLedger]:
    by_job: dict[int, dict[str, Line]] = {}
    holders: dict[int, int] = {}
    for workload_id, state, buckets, gpu_j, node_j, over_j, estimated, most in rows:
        line = Line(
            gpu_hours=float(buckets) * step_h,
            energy=Energy(_kwh(gpu_j), _kwh(node_j), _kwh(over_j)),
            estimated_hours=float(estimated or 0) * step_h,
        )
        by_job.setdefault(int(workload_id), {})[str(state)] = line
        holders[int(workload_id)] = max(holders.get(int(workload_id), 1), int(most))
    workloads = Workload.objects.using(using).in_bulk(list(by_job))
    jobs = []
    for workload_id, lines in sorted(by_job.items()):
        wl = workloads[workload_id]
        total = _total(lines.values())
        jobs.append(
            JobLedger(
                workload_id=workload_id,
                kind=wl.kind,
                key=wl.key,
                owner=wl.owner,
                split=EXCLUSIVE if holders[workload_id] == 1 else EVEN,
                states=lines,
                price=price(site, total.energy.total_kwh, total.gpu_hours),
            )
        )
    return jobs
