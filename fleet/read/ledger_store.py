"""The energy ledger as stored per hour and per UTC day, read: a month of a large fleet is a
few rows per node, holder and state (fleet/read/ledger.py `fold` sums them), not every
GPU-bucket folded again. The efficiency page and the weekly report read it.

What is stored (`fw_ledger_1h`, `fw_ledger_1d`, migration 0023): the ledger's parts
(`ledger.parts`) summed per hour, node, holder (`workload_id`, 0 for nobody) and state, and
the same per UTC day; figures are GPU-seconds and joules, so minutes and hours add alike.
`COLUMNS` is the tables' shape, owned here. fleet/storage/ledger.py keeps them (the
`fleet.ledger` task): closed hours about 10 minutes after they end, the open hour again every
2 minutes of new data, late rewrites marked by the hourly rollup (docs/ledger.md).

The thresholds are `DEFAULT_RULES`: a ledger with other rules is computed, not read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.utils import CursorWrapper

from fleet.models import Site
from fleet.read.ledger import J_PER_KWH, Energy, Ledger, Line, Part, fold
from fleet.read.ledger_rules import DEFAULT_RULES
from fleet.read.ledger_sql import Window

HOUR_S, DAY_S = 3600, 86_400
FIGURES = (
    "gpu_s",
    "gpu_j",
    "node_j",
    "over_j",
    "estimated_s",
    "resets",
    "no_pue_s",
    "series_j",
    "series_g",
)
KEY = ("site_id", "bucket", "node_id", "workload_id", "state")
COLUMNS = (*KEY, *FIGURES, "holders")


@dataclass(frozen=True, slots=True)
class Progress:
    """Every hour before `closed_until` is final; hours up to `open_until` are stored for
    now (computed again as minutes arrive)."""

    closed_until: int
    open_until: int


def _floor(t: float, step: int) -> int:
    return int(t // step) * step


# -- reading ---------------------------------------------------------------------------------


def progress(site_id: int, using: str = DEFAULT_DB_ALIAS) -> Progress | None:
    with connections[using].cursor() as cur:
        return read_progress(cur, site_id)


def read_progress(cur: CursorWrapper, site_id: int) -> Progress | None:
    """The site's progress row, on the caller's cursor (the keeper reads it in its transaction)."""
    cur.execute(
        "SELECT closed_until, open_until FROM fw_ledger_state WHERE site_id = %s", [site_id]
    )
    row = cur.fetchone()
    return None if row is None else Progress(int(row[0]), int(row[1]))


def stored_ledger(window: Window, using: str = DEFAULT_DB_ALIAS) -> Ledger:
    """The ledger of `window` from the stored hours and days. `window.a` on an hour; `b`
    where the store reaches (`Progress.open_until`) or before, on an hour or a minute the
    open hours were computed to. Per node, not per GPU (`Ledger.gpus` is empty)."""
    site = Site.objects.using(using).get(pk=window.site_id)
    with connections[using].cursor() as cur:
        cur.execute(_read_sql(window))
        rows = cur.fetchall()
        metered = _metered(cur, window)
    found = [
        Part(
            0,
            int(node),
            None,
            int(wl),
            str(state),
            _line(figures),
            int(most),
        )
        for node, wl, state, *figures, most in rows
    ]
    return fold(site, window, DEFAULT_RULES, found, metered, using)


def _read_sql(w: Window) -> str:
    """Per node, holder and state over [a, b): whole UTC days from the daily rows, the
    hours around them from the hourly ones."""
    d0 = -(-w.a // DAY_S) * DAY_S
    d1 = _floor(w.b, DAY_S)
    sums = ", ".join(f"SUM({f})" for f in FIGURES)
    site = int(w.site_id)
    if d0 < d1:
        hours = f"((bucket >= {w.a} AND bucket < {d0}) OR (bucket >= {d1} AND bucket < {w.b}))"
        days = (
            f" UNION ALL SELECT {', '.join(COLUMNS)} FROM fw_ledger_1d WHERE site_id = {site}"
            f" AND bucket >= {d0} AND bucket < {d1}"
        )
    else:
        hours, days = f"bucket >= {w.a} AND bucket < {w.b}", ""
    return (
        f"SELECT node_id, workload_id, state, {sums}, MAX(holders) FROM"
        f" (SELECT {', '.join(COLUMNS)} FROM fw_ledger_1h WHERE site_id = {site} AND {hours}"
        f"{days}) x GROUP BY node_id, workload_id, state"
    )


def _metered(cur: CursorWrapper, w: Window) -> tuple[float, float]:
    """The facility meters over [a, b), kWh: the hourly tier for the hours it has rolled up,
    the 1-minute tier after them."""
    cur.execute("SELECT done_until FROM fw_rollup_state WHERE tier = '1h' AND kind = 'facility'")
    row = cur.fetchone()
    edge = min(_floor(w.b, HOUR_S), int(row[0]) if row else w.a)
    edge = max(edge, w.a)
    total = it = 0.0
    for table, lo, hi, step in (
        ("fw_facility_1h", w.a, edge, HOUR_S),
        ("fw_facility_1m", edge, w.b, 60),
    ):
        if lo >= hi:
            continue
        cur.execute(
            f"SELECT SUM(total_power_w_mean) * {step}, SUM(it_power_w_mean) * {step} FROM"
            f" {table} WHERE site_id = %s AND bucket >= %s AND bucket < %s"
            " AND total_power_w_mean IS NOT NULL AND it_power_w_mean > 0",
            [w.site_id, lo, hi],
        )
        j, it_j = cur.fetchone()
        total += float(j or 0.0) / J_PER_KWH
        it += float(it_j or 0.0) / J_PER_KWH
    return total, it


def _line(figures: Sequence[Any]) -> Line:
    gpu_s, gpu_j, node_j, over_j, estimated_s, resets, no_pue_s, series_j, series_g = (
        float(f or 0) for f in figures
    )
    return Line(
        gpu_hours=gpu_s / HOUR_S,
        energy=Energy(gpu_j / J_PER_KWH, node_j / J_PER_KWH, over_j / J_PER_KWH),
        estimated_hours=estimated_s / HOUR_S,
        resets=resets,
        hours_without_pue=no_pue_s / HOUR_S,
        series_kwh=series_j / J_PER_KWH,
        series_g=series_g,
    )
