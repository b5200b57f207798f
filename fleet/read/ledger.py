"""The energy ledger of a site over a window: each GPU's energy per state, each job's energy
with its share of the node and of the facility, the pool's, carbon and cost, and how well
it all adds up to the facility meters (docs/ledger.md).

The heavy part is SQL (fleet/read/ledger_sql.py): the database folds every GPU-bucket and
answers a few rows per hour, GPU, holder and state (`Part`s); `fold` sums them into the
site's, each node's and GPU's, and each job's lines. `ledger()` computes the parts from the
rollup tiers; fleet/read/ledger_store.py keeps them per hour and day so a month of a large
fleet is read, not recomputed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from fleet.models import GPU, Site, Workload
from fleet.models.sites import GridIntensity, IdleEnergyTo
from fleet.read import ledger_rules as r
from fleet.read.ledger_rules import DEFAULT_RULES, LedgerRules
from fleet.read.ledger_sql import (
    SM_SPLIT,
    Window,
    metered_sql,
    nodes_without_gpus_sql,
    per_holder_sql,
    shares_sql,
    unmetered_it_sql,
)
from fleet.storage import retention

J_PER_KWH = 3.6e6
EXCLUSIVE = "exclusive"  # one workload held the GPU in each of its buckets
SM = "sm"  # in one or more shared buckets, split by its processes' SM activity
EVEN = "even"  # shared buckets split by the part of each its interval covers


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
    resets: float = 0.0  # shares: a reset on a GPU two jobs hold counts half to each
    hours_without_pue: float = 0.0
    # The part of `energy.total_kwh` in hours the site's grid-intensity series covers, and
    # its carbon at those hours' values (the site's constant prices the rest).
    series_kwh: float = 0.0
    series_g: float = 0.0

    def __add__(self, other: Line) -> Line:
        return Line(
            self.gpu_hours + other.gpu_hours,
            self.energy + other.energy,
            self.estimated_hours + other.estimated_hours,
            self.resets + other.resets,
            self.hours_without_pue + other.hours_without_pue,
            self.series_kwh + other.series_kwh,
            self.series_g + other.series_g,
        )


def _total(lines: Iterable[Line]) -> Line:
    return sum(lines, Line())


@dataclass(frozen=True, slots=True)
class Part:
    """One row of the fold: an hour's share of one GPU (or of a node's GPUs together, `gpu`
    None, as stored), one holder (`workload_id`, 0 for nobody) and one state. `NODE_ONLY`
    parts carry node energy in buckets none of the node's GPUs has a row for."""

    hour: int
    node_id: int
    gpu: int | None
    workload_id: int
    state: str
    line: Line
    holders: int = 0  # most owning intervals on the GPU at once, + SM_SPLIT if split by SM


# Energy that is the pool's and no GPU's state: node energy in buckets where none of its GPUs
# has a row, and IT energy the facility meter saw that no node reports (kept with node 0).
NODE_ONLY = "node_without_gpu_rows"
UNMETERED_IT = "it_no_node_reports"
POOL_ONLY = (NODE_ONLY, UNMETERED_IT)


@dataclass(frozen=True, slots=True)
class Price:
    """Carbon (kg CO2) and cost of an energy and GPU-hours at a site's rates; None where the
    site has no rate."""

    carbon_kg: float | None
    cost: float | None
    currency: str


def price(site: Site, line: Line, gpu_hours: float) -> Price:
    """`line`'s energy (overhead included) and `gpu_hours` held at the site's rates. Carbon:
    the hours its grid-intensity series covers at their values, the rest at the site's
    constant; None when it has neither."""
    energy_kwh = line.energy.total_kwh
    constant = site.grid_gco2_per_kwh
    carbon = None
    if constant is not None or line.series_kwh > 0:
        rest_kwh = max(0.0, energy_kwh - line.series_kwh)
        carbon = (line.series_g + rest_kwh * (constant or 0.0)) / 1e3
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
class NodeLedger:
    """A node's GPUs together: what halls and racks add up."""

    node_id: int
    states: dict[str, Line]


@dataclass(frozen=True, slots=True)
class JobLedger:
    """A workload's energy: what its GPUs used while it held them, whatever their state."""

    workload_id: int
    kind: str
    key: str
    owner: str
    split: str  # EXCLUSIVE, SM or EVEN (`split_of`)
    states: dict[str, Line]
    price: Price  # of `charged`, with the GPU-hour price on every hour held
    charged_states: tuple[str, ...] = r.HELD_STATES

    @property
    def total(self) -> Line:
        return _total(self.states.values())

    @property
    def charged(self) -> Line:
        """What the job pays for: every state it held the GPUs in, or, where the site charges
        idle energy to the pool, all but the idle ones."""
        return _total(line for s, line in self.states.items() if s in self.charged_states)


@dataclass(frozen=True, slots=True)
class Ledger:
    window: Window
    rules: LedgerRules
    states: dict[str, Line]  # the site's GPU-hours and energy per state
    nodes: list[NodeLedger]
    # Per GPU: only a ledger computed from the tiers (`ledger()`); stored hours are per node.
    gpus: list[GpuLedger]
    jobs: list[JobLedger]
    nodes_without_gpus: Energy  # node energy in buckets with no GPU row: the pool's
    unmetered_it: Energy  # IT energy the facility meter saw beyond the nodes': the pool's
    metered_facility_kwh: float
    metered_it_kwh: float
    price: Price  # the whole ledger's
    charged_states: tuple[str, ...] = r.HELD_STATES  # `charged_states(site)`

    @property
    def attributed(self) -> Line:
        """What the jobs are charged: held GPU-buckets (the idle ones too, unless the site
        charges idle energy to the pool)."""
        return _total(self.states.get(s, Line()) for s in self.charged_states)

    @property
    def pool(self) -> Energy:
        """Energy no job pays for: unallocated and lost GPUs, idle ones where the site says
        so, nodes whose GPUs sent nothing, IT energy no node reports (switches, storage, the
        racks' fans and PDUs)."""
        lines = (self.states.get(s, Line()) for s in r.STATES if s not in self.charged_states)
        return _total(lines).energy + self.nodes_without_gpus + self.unmetered_it

    @property
    def total_kwh(self) -> float:
        return self.attributed.energy.total_kwh + self.pool.total_kwh

    @property
    def held_hours(self) -> float:
        """GPU-hours jobs held, idle or not: what a GPU-hour price charges."""
        return _total(self.states.get(s, Line()) for s in r.HELD_STATES).gpu_hours

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
        the racks' fans and PDUs): in the pool."""
        return self.unmetered_it.it_kwh


def charged_states(site: Site) -> tuple[str, ...]:
    """The held states a job pays for: all of them, or all but the idle ones where the site
    charges idle energy to the pool (`Site.idle_energy_to`)."""
    if site.idle_energy_to == IdleEnergyTo.POOL:
        return tuple(s for s in r.HELD_STATES if s not in r.IDLE_STATES)
    return r.HELD_STATES


def tier_for(a: float, b: float, now: float) -> str:
    """The 1-minute tier while it still holds the window, else hours: a 30-day page reads
    720 rows per GPU instead of 43,200, and its states are then decided per hour."""
    return "1m" if now - a <= retention.kept_s("1m", "gpu") else "1h"


def ledger(
    window: Window, rules: LedgerRules = DEFAULT_RULES, using: str = DEFAULT_DB_ALIAS
) -> Ledger:
    """The ledger of `window`, computed from the rollup tiers (see the module's docstring)."""
    site = Site.objects.using(using).get(pk=window.site_id)
    metered_j, metered_it_j, _ = _rows(using, metered_sql(window))[0]
    metered = (_kwh(metered_j), _kwh(metered_it_j))
    return fold(site, window, rules, parts(window, rules, using), metered, using)


def parts(window: Window, rules: LedgerRules, using: str = DEFAULT_DB_ALIAS) -> list[Part]:
    """The window's parts per GPU: the statement's rows (split by SM activity where the
    minutes have some kept); the buckets a GPU has no row for
    (inventory GPUs that sent nothing included) as `LOST`, per hour; node energy without GPU
    rows as `NODE_ONLY`; the site's IT energy no node reports as `UNMETERED_IT` (node 0)."""
    vendor = _vendor(using)
    step_h = window.step / 3600
    sm = window.tier == "1m" and bool(_rows(using, shares_sql(window, rules)))
    found = [
        Part(int(hour), int(node), int(gpu), int(wl), str(state), _line(sums, step_h), int(most))
        for hour, node, gpu, wl, state, *sums, most in _rows(
            using, per_holder_sql(window, rules, vendor, sm)
        )
    ]
    lost = _lost(window, found, _inventory(window, using))
    node_only = [
        Part(int(hour), int(node), None, 0, NODE_ONLY, Line(energy=Energy(0.0, _kwh(j), _kwh(o))))
        for hour, node, j, o in _rows(using, nodes_without_gpus_sql(window, vendor))
    ]
    unmetered = [
        Part(int(hour), 0, None, 0, UNMETERED_IT, Line(energy=Energy(0.0, _kwh(j), _kwh(o))))
        for hour, j, o in _rows(using, unmetered_it_sql(window, vendor))
        if j is not None
    ]
    return with_series(window, found + lost + node_only + unmetered, using)


def with_series(w: Window, found: list[Part], using: str) -> list[Part]:
    """`found` with the carbon of the hours the site's grid-intensity series covers."""
    hours = {p.hour for p in found}
    values = dict(
        GridIntensity.objects.using(using)
        .filter(site_id=w.site_id, hour__in=hours)
        .values_list("hour", "gco2_per_kwh")
    )
    if not values:
        return found
    return [p if p.hour not in values else _with_value(p, values[p.hour]) for p in found]


def _with_value(p: Part, gco2_per_kwh: float) -> Part:
    kwh = p.line.energy.total_kwh
    return replace(p, line=replace(p.line, series_kwh=kwh, series_g=kwh * gco2_per_kwh))


def _inventory(w: Window, using: str) -> list[tuple[int, int]]:
    known = GPU.objects.using(using).filter(node__rack__hall__site_id=w.site_id)
    if w.node_ids is not None:
        known = known.filter(node_id__in=w.node_ids)
    return list(known.values_list("node_id", "index"))


def _lost(w: Window, found: list[Part], inventory: list[tuple[int, int]]) -> list[Part]:
    """`LOST` parts for each GPU's buckets without a row, hour by hour: a GPU in the
    inventory, or seen in the window, is expected in every bucket of it."""
    have: dict[tuple[int, int, int], float] = {}
    for p in found:
        key = (p.hour, p.node_id, p.gpu if p.gpu is not None else -1)
        have[key] = have.get(key, 0.0) + p.line.gpu_hours
    gpus = set(inventory) | {(node, gpu) for _, node, gpu in have}
    out = []
    for hour in range(w.a - w.a % 3600, w.b, 3600):
        expected_h = (min(w.b, hour + 3600) - max(w.a, hour)) / 3600
        for node, gpu in gpus:
            missing_h = expected_h - have.get((hour, node, gpu), 0.0)
            if missing_h > 1e-9 * expected_h + 1e-12:
                line = Line(gpu_hours=round(missing_h * 3600 / w.step) * w.step / 3600)
                out.append(Part(hour, node, gpu, 0, r.LOST, line))
    return out


def fold(
    site: Site,
    window: Window,
    rules: LedgerRules,
    parts: Iterable[Part],
    metered: tuple[float, float],
    using: str,
) -> Ledger:
    """The ledger of `parts`: sums per state, node, GPU and job; with the facility meters'
    (total, IT) kWh over the window; carbon and cost at the site's rates."""
    states: dict[str, Line] = {}
    nodes: dict[int, dict[str, Line]] = {}
    gpus: dict[tuple[int, int], dict[str, Line]] = {}
    jobs: dict[int, dict[str, Line]] = {}
    most: dict[int, int] = {}
    pool_only = {state: Energy() for state in POOL_ONLY}
    everything = Line()
    for p in parts:
        everything = everything + p.line
        if p.state in pool_only:
            pool_only[p.state] = pool_only[p.state] + p.line.energy
            continue
        _add(states, p.state, p.line)
        _add(nodes.setdefault(p.node_id, {}), p.state, p.line)
        if p.gpu is not None:
            _add(gpus.setdefault((p.node_id, p.gpu), {}), p.state, p.line)
        if p.workload_id:
            _add(jobs.setdefault(p.workload_id, {}), p.state, p.line)
            most[p.workload_id] = max(most.get(p.workload_id, 1), p.holders)
    led = Ledger(
        window=window,
        rules=rules,
        states=states,
        nodes=[NodeLedger(n, lines) for n, lines in sorted(nodes.items())],
        gpus=[GpuLedger(n, g, lines) for (n, g), lines in sorted(gpus.items())],
        jobs=_jobs(site, jobs, most, using),
        charged_states=charged_states(site),
        nodes_without_gpus=pool_only[NODE_ONLY],
        unmetered_it=pool_only[UNMETERED_IT],
        metered_facility_kwh=metered[0],
        metered_it_kwh=metered[1],
        price=Price(None, None, site.currency),
    )
    return replace(led, price=price(site, everything, led.held_hours))


def _add(into: dict[str, Line], state: str, line: Line) -> None:
    into[state] = into.get(state, Line()) + line


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
        resets=float(resets or 0),
        hours_without_pue=float(no_pue or 0) * step_h,
    )


def split_of(most: int) -> str:
    """How a job's GPUs were split, from its parts' most `holders`: by SM activity in one
    bucket or more (`SM_SPLIT` set), else alone on them throughout, else by time."""
    if most >= SM_SPLIT:
        return SM
    return EXCLUSIVE if most == 1 else EVEN


def _jobs(
    site: Site, by_job: dict[int, dict[str, Line]], most: dict[int, int], using: str
) -> list[JobLedger]:
    # only what a job line names: whole rows of thousands of workloads cost a tenth of a second
    workloads = (
        Workload.objects.using(using)
        .only("kind", "key", "namespace", "account", "user")
        .in_bulk(list(by_job))
    )
    jobs = []
    for workload_id, lines in sorted(by_job.items()):
        wl = workloads.get(workload_id)
        if wl is None:  # removed since (its intervals go with it): nobody to charge
            continue
        charged = charged_states(site)
        paid = _total(line for st, line in lines.items() if st in charged)
        held = _total(line for st, line in lines.items() if st in r.HELD_STATES).gpu_hours
        jobs.append(
            JobLedger(
                workload_id=workload_id,
                kind=wl.kind,
                key=wl.key,
                owner=wl.owner,
                split=split_of(most[workload_id]),
                states=lines,
                price=price(site, paid, held),
                charged_states=charged,
            )
        )
    return jobs
