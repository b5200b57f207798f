"""Stranded capacity per rack: the power a rack's budget allows that its GPUs never draw.

Per rack over a window (30 days by default):

- **budget** — the rack's power budget from the inventory (`Rack.power_budget_kw`);
- **p95 and p99 draw** — of the rack's measured draw per rollup bucket, its source chosen
  per bucket as the live pages choose it (PDU, else node meters, else GPU power:
  fleet/read/capacity_sql.py; the source's words are `fleet.words.SOURCE_WORDS`);
- **stranded kW** = budget − p99, never negative: what the rack could still draw in all
  but its busiest 1 % of hours;
- **GPUs that would fit** = stranded W ÷ the max power limit in force of the rack's GPU
  model (`fleet.health.limits.limit_in_force`: entered, else reported), rounded down.
  A GPU's limit, not its typical draw: stranded kW is measured against the rack's p99, and
  a GPU added there may run at its limit in those same hours; a typical (p95) draw would
  count the headroom twice. The hosts' own power (CPUs, fans) is not added;
- **GPUs held under their limit by the budget** — GPUs whose enforced limit now is below
  their max limit in force, in a rack whose p99 draw is near its budget;
- **budget spent while idle** — p95 at or above most of the budget while the rack's GPUs
  are mostly idle (mean utilisation low): the budget is held, not used.

The thresholds are data (`THRESHOLDS`), here and nowhere else.

Which tier: the finest whose retention holds the whole window for racks, nodes and GPUs
(`fleet.storage.retention.kept_s`). By default 1-minute means are kept 72 hours, so a
30-day p99 from them would describe the last three days, not the month; 1-hour means are
kept 90 days (GPU, node) and 400 (rack), so the whole window is there. A p99 of 720 hourly
means is the draw exceeded in about 7 hours of the month: sustained draw, what a budget
(a breaker's continuous rating) is about, with bursts under an hour averaged in. Where
1-minute means are kept longer than the window, they are used. Both engines read the same
tier and the same buckets, so they give the same figures.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS

from fleet.health.limits import limit_in_force
from fleet.models import GPU, Rack
from fleet.read.capacity_sql import enforced_limits, rack_draws, rack_utilisation
from fleet.storage.retention import kept_s
from fleet.storage.schema import TIER_SECONDS
from fleet.words import SOURCE_WORDS

__all__ = (
    "THRESHOLDS",
    "WINDOW_S",
    "CapacityThresholds",
    "RackCapacity",
    "site_capacity",
    "tier_for",
)

DAY_S = 86_400
WINDOW_S = 30 * DAY_S
KINDS = ("rack", "node", "gpu")  # the draw is read from all three (capacity_sql.py)


@dataclass(frozen=True)
class CapacityThresholds:
    """Fleetwatch's choices. `spent_fraction` is the power page's warning level of rack
    power against budget (fleet.health.thresholds.RACK_POWER_WARN_FRACTION, 90 %)."""

    spent_fraction: float = 0.9  # p95 ≥ this × budget: the budget is spent
    idle_util_pct: float = 20.0  # mean GPU utilisation below this: the GPUs idle
    near_fraction: float = 0.9  # p99 ≥ this × budget: caps there are the budget's
    capped_below: float = 0.99  # enforced limit < this × max limit: capped (not rounding)


THRESHOLDS = CapacityThresholds()


@dataclass(frozen=True)
class RackCapacity:
    rack_id: int
    rack: str
    hall: str
    budget_kw: float
    p95_kw: float | None  # None: no measured draw in the window
    p99_kw: float | None
    covered_s: int  # seconds of buckets with a measured draw
    sources: dict[str, int]  # power source → buckets it gave the draw
    gpus: int
    gpu_model: str  # the rack's most common GPU model ("" without GPUs)
    gpu_limit_w: float | None  # that model's max power limit in force, the highest in the rack
    mean_util_pct: float | None
    capped_gpus: int  # enforced limit below the max limit in force
    thresholds: CapacityThresholds = field(default=THRESHOLDS, repr=False)

    @property
    def stranded_kw(self) -> float | None:
        if self.p99_kw is None:
            return None
        return max(0.0, self.budget_kw - self.p99_kw)

    @property
    def gpus_that_fit(self) -> int | None:
        stranded = self.stranded_kw
        if stranded is None or not self.gpu_limit_w:
            return None
        return math.floor(stranded * 1000.0 / self.gpu_limit_w + 1e-9)

    @property
    def near_budget(self) -> bool:
        return self.p99_kw is not None and (
            self.p99_kw >= self.thresholds.near_fraction * self.budget_kw
        )

    @property
    def held_by_budget(self) -> int:
        """GPUs held under their limit by the rack's budget."""
        return self.capped_gpus if self.near_budget else 0

    @property
    def spent_while_idle(self) -> bool:
        t = self.thresholds
        if self.p95_kw is None or self.mean_util_pct is None:
            return False
        spent = self.p95_kw >= t.spent_fraction * self.budget_kw
        return spent and self.mean_util_pct < t.idle_util_pct

    @property
    def source(self) -> str:
        """The power source that gave most of the window's buckets."""
        if not self.sources:
            return "none"
        return max(sorted(self.sources), key=lambda s: self.sources[s])

    @property
    def source_words(self) -> str:
        return SOURCE_WORDS.get(self.source, self.source)


def tier_for(window_s: int) -> str:
    """The finest rollup tier that holds the whole window for racks, nodes and GPUs."""
    return "1m" if min(kept_s("1m", kind) for kind in KINDS) >= window_s else "1h"


@dataclass(frozen=True)
class _GpuFacts:
    count: int
    model: str
    limit_w: float | None
    capped: int


def _gpu_facts(
    site_id: int, since: float, using: str, t: CapacityThresholds
) -> dict[int, _GpuFacts]:
    enforced = enforced_limits(site_id, since, using)
    rows = GPU.objects.using(using).filter(node__rack__hall__site_id=site_id)
    by_rack: dict[int, list[tuple[str, float | None, float | None]]] = {}
    for rack_id, node_id, index, model, entered, reported in rows.values_list(
        "node__rack_id",
        "node_id",
        "index",
        "model",
        "power_limit_max_w",
        "reported_power_limit_max_w",
    ):
        limit = limit_in_force(entered, reported).value
        by_rack.setdefault(rack_id, []).append((model, limit, enforced.get((node_id, index))))
    return {rack_id: _facts(gpus, t) for rack_id, gpus in by_rack.items()}


def _facts(gpus: list[tuple[str, float | None, float | None]], t: CapacityThresholds) -> _GpuFacts:
    models = Counter(model for model, _, _ in gpus)
    model = min(models, key=lambda m: (-models[m], m))  # most common, then by name
    limits = [limit for m, limit, _ in gpus if m == model and limit is not None]
    capped = sum(
        1
        for _, limit, now in gpus
        if limit is not None and now is not None and now < t.capped_below * limit
    )
    return _GpuFacts(len(gpus), model, max(limits, default=None), capped)


def site_capacity(
    site_id: int,
    now: float,
    window_s: int = WINDOW_S,
    using: str = DEFAULT_DB_ALIAS,
    thresholds: CapacityThresholds = THRESHOLDS,
) -> list[RackCapacity]:
    """Every rack of the site, in the inventory's order, over the `window_s` before `now`."""
    tier = tier_for(window_s)
    since = now - window_s
    draws = {d.rack_id: d for d in rack_draws(site_id, since, now, tier, using)}
    util = rack_utilisation(site_id, since, now, tier, using)
    gpus = _gpu_facts(site_id, since, using, thresholds)
    racks = Rack.objects.using(using).filter(hall__site_id=site_id)
    out = []
    for rack_id, name, hall, budget in racks.values_list(
        "pk", "name", "hall__name", "power_budget_kw"
    ):
        draw = draws.get(rack_id)
        facts = gpus.get(rack_id, _GpuFacts(0, "", None, 0))
        out.append(
            RackCapacity(
                rack_id=rack_id,
                rack=name,
                hall=hall,
                budget_kw=float(budget),
                p95_kw=None if draw is None else draw.p95_w / 1000.0,
                p99_kw=None if draw is None else draw.p99_w / 1000.0,
                covered_s=0 if draw is None else draw.buckets * TIER_SECONDS[tier],
                sources={} if draw is None else draw.sources,
                gpus=facts.count,
                gpu_model=facts.model,
                gpu_limit_w=facts.limit_w,
                mean_util_pct=util.get(rack_id),
                capped_gpus=facts.capped,
                thresholds=thresholds,
            )
        )
    return out
