"""The energy ledger's hours and days kept (`keep`, the `fleet.ledger` task every minute), per
site, in the tables fleet/read/ledger_store.py reads and owns the shape of (`COLUMNS`):

- **Closed hours.** An hour is computed for good once the 1-minute tiers of GPUs and nodes
  are rolled up to the hour's end plus the ledger's run lookback (a run of idle minutes that
  crosses the hour counts whole), and the hourly tiers (the PUE) past its end. Up to
  `CLOSED_HOURS_PER_CHUNK` hours a transaction; from the 1-minute tier while it holds them,
  else the hourly one (states then decided per hour, as `ledger.tier_for` says).
- **Open hours.** From the last closed hour to the newest rolled-up minute, computed again
  whenever `OPEN_REFRESH_S` of new minutes exist: the page shows the last hour too.
- **Late data.** When the hourly rollup recomputes an hour of a node or a site's facility
  meters (late rows: fleet/storage/late.py), it leaves a mark in `fw_ledger_late`; the
  next run computes those closed hours of those nodes (or the whole site) again.
- Each write replaces the hours it computed (and re-sums their days) in one transaction,
  claimed by a conditional UPDATE of the site's progress row, so two workers never write
  the same hours and a run cut short leaves nothing half-written.
- `apply_intensity`: a grid-intensity series set for stored hours reprices them.

What is written is what `fleet.read.ledger.parts` computes (one statement over the tiers),
summed per hour, node, holder and state.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.utils import CursorWrapper

from fleet.models import Site
from fleet.read.ledger import J_PER_KWH, Part, parts
from fleet.read.ledger_rules import DEFAULT_RULES
from fleet.read.ledger_sql import Window
from fleet.read.ledger_store import COLUMNS, DAY_S, FIGURES, HOUR_S, Progress, read_progress
from fleet.storage import retention

# Hours per transaction while catching up: six hours of 10,000 GPUs' minutes is ~4 M rows.
CLOSED_HOURS_PER_CHUNK = {"1m": 6, "1h": 48}
# The open hours are computed again once this many seconds of new minutes exist.
OPEN_REFRESH_S = 120
# One run's work before it leaves the rest to the next (the task's soft limit is 600 s).
RUN_BUDGET_S = 240.0


def _floor(t: float, step: int) -> int:
    return int(t // step) * step


def keep(now: float, using: str = DEFAULT_DB_ALIAS, budget_s: float = RUN_BUDGET_S) -> int:
    """Bring every site's stored ledger up to date as of `now`; hours written."""
    deadline = time.monotonic() + budget_s
    written = 0
    for site_id in Site.objects.using(using).order_by("pk").values_list("pk", flat=True):
        written += keep_site(site_id, now, using, deadline)
    return written


def keep_site(site_id: int, now: float, using: str, deadline: float) -> int:
    """Closed hours first (catching up in chunks), then late marks, then the open hours."""
    written = 0
    while time.monotonic() < deadline:
        step = _step(site_id, now, using)
        if step is None:
            break
        written += step
    return written


@dataclass(frozen=True, slots=True)
class _Ready:
    closed: int  # hours before it may be closed
    open: int  # minutes before it are rolled up


def _ready(cur: CursorWrapper) -> _Ready | None:
    """How far the rollup tiers let the ledger go; None before the first GPU minute."""
    cur.execute("SELECT tier, kind, done_until FROM fw_rollup_state")
    done = {(str(t), str(k)): int(d) for t, k, d in cur.fetchall()}
    if ("1m", "gpu") not in done:
        return None
    minutes = min(done[("1m", k)] for k in ("gpu", "node") if ("1m", k) in done)
    hours = [done[("1h", k)] for k in ("gpu", "node", "facility") if ("1h", k) in done]
    closed = min(_floor(minutes - DEFAULT_RULES.lookback_s, HOUR_S), *hours)
    return _Ready(closed, _floor(minutes, 60))


def _step(site_id: int, now: float, using: str) -> int | None:
    """One transaction of work; hours written, or None when there is nothing to do."""
    conn = connections[using]
    with conn.cursor() as cur:
        ready = _ready(cur)
        if ready is None:
            return None
        seen = read_progress(cur, site_id) or _start(cur, site_id, now)
    if seen is None:
        return None
    with transaction.atomic(using=using), conn.cursor() as cur:
        if not _claim(cur, site_id, seen):
            return 0  # another worker moved it: read again
        if seen.closed_until < ready.closed:
            tier = _tier_for(seen.closed_until, now)
            b = min(ready.closed, seen.closed_until + CLOSED_HOURS_PER_CHUNK[tier] * HOUR_S)
            _write(cur, Window(site_id, seen.closed_until, b, tier), using)
            _save(cur, site_id, Progress(b, max(b, seen.open_until)))
            return (b - seen.closed_until) // HOUR_S
        marked = _take_marks(cur, site_id, seen.closed_until)
        if marked:
            for hour, nodes in sorted(marked.items()):
                w = Window(site_id, hour, hour + HOUR_S, _tier_for(hour, now), nodes)
                _write(cur, w, using)
            return len(marked)
        a = seen.closed_until
        if ready.open - seen.open_until >= OPEN_REFRESH_S and ready.open > a:
            _write(cur, Window(site_id, a, ready.open, "1m"), using)
            _save(cur, site_id, Progress(a, ready.open))
            return 0
        return None


def _tier_for(a: int, now: float) -> str:
    """Minutes while the 1-minute tier still holds the hour and the lookback before it (with
    an hour to spare: retention deletes whole hours), else hours."""
    oldest_minute = now - retention.kept_s("1m", "gpu") + HOUR_S
    return "1m" if a - DEFAULT_RULES.lookback_s >= oldest_minute else "1h"


def _start(cur: CursorWrapper, site_id: int, now: float) -> Progress | None:
    """A site's first run: from its oldest GPU hour the hourly tier keeps (or its oldest
    minute, before the first hour is rolled up). None while it has no GPU rows."""
    nodes = (
        "SELECT n.id FROM fleet_node n JOIN fleet_rack k ON k.id = n.rack_id"
        " JOIN fleet_hall h ON h.id = k.hall_id WHERE h.site_id = %s"
    )
    oldest = None
    for table in ("fw_gpu_1h", "fw_gpu_1m"):
        cur.execute(f"SELECT MIN(bucket) FROM {table} WHERE node_id IN ({nodes})", [site_id])
        found = cur.fetchone()[0]
        if found is not None:
            oldest = int(found) if oldest is None else min(oldest, int(found))
    if oldest is None:
        return None
    start = max(_floor(oldest, HOUR_S), _floor(now - retention.kept_s("1h", "gpu"), HOUR_S))
    # Two first runs at once both try; the loser's insert is a no-op.
    cur.execute(
        "INSERT INTO fw_ledger_state (site_id, closed_until, open_until) VALUES (%s, %s, %s)"
        " ON CONFLICT (site_id) DO NOTHING",
        [site_id, start, start],
    )
    return read_progress(cur, site_id)


def _claim(cur: CursorWrapper, site_id: int, seen: Progress) -> bool:
    """Take the site's progress row for this transaction, only if nobody moved it since."""
    cur.execute(
        "UPDATE fw_ledger_state SET closed_until = closed_until WHERE site_id = %s"
        " AND closed_until = %s AND open_until = %s",
        [site_id, seen.closed_until, seen.open_until],
    )
    return bool(cur.rowcount == 1)


def _save(cur: CursorWrapper, site_id: int, p: Progress) -> None:
    cur.execute(
        "UPDATE fw_ledger_state SET closed_until = %s, open_until = %s WHERE site_id = %s",
        [p.closed_until, p.open_until, site_id],
    )


def _take_marks(
    cur: CursorWrapper, site_id: int, closed_until: int
) -> dict[int, tuple[int, ...] | None]:
    """The site's marks, taken (deleted); per closed hour, the nodes to compute again (None:
    the whole site). Marks of hours not closed yet are dropped: those hours are computed
    anyway."""
    nodes = (
        "SELECT n.id FROM fleet_node n JOIN fleet_rack k ON k.id = n.rack_id"
        " JOIN fleet_hall h ON h.id = k.hall_id WHERE h.site_id = %s"
    )
    cur.execute(
        f"DELETE FROM fw_ledger_late WHERE site_id = %s OR node_id IN ({nodes})"
        " RETURNING node_id, hour",
        [site_id, site_id],
    )
    hours: dict[int, set[int] | None] = {}
    for node_id, hour in cur.fetchall():
        hour = int(hour)
        if hour >= closed_until:
            continue
        if node_id is None:
            hours[hour] = None
        elif (chosen := hours.setdefault(hour, set())) is not None:
            chosen.add(int(node_id))
    return {h: None if n is None else tuple(sorted(n)) for h, n in hours.items()}


def _write(cur: CursorWrapper, w: Window, using: str) -> None:
    """Replace the stored hours of `w` (of its nodes, when it names some) with its parts,
    then sum their days again."""
    rows = _hour_rows(w.site_id, parts(w, DEFAULT_RULES, using))
    site = int(w.site_id)
    first_hour, end_hour = _floor(w.a, HOUR_S), -(-w.b // HOUR_S) * HOUR_S
    chosen = _chosen(w.node_ids)
    cur.execute(
        f"DELETE FROM fw_ledger_1h WHERE site_id = {site} AND bucket >= {first_hour}"
        f" AND bucket < {end_hour}{chosen}"
    )
    _insert(cur, "fw_ledger_1h", rows)
    first_day, end_day = _floor(first_hour, DAY_S), -(-end_hour // DAY_S) * DAY_S
    _resum_days(cur, site, first_day, end_day, chosen)


def _resum_days(
    cur: CursorWrapper, site_id: int, first_day: int, end_day: int, chosen: str
) -> None:
    """The daily rows of [first_day, end_day) (of the `chosen` nodes) from their hours."""
    site = int(site_id)
    cur.execute(
        f"DELETE FROM fw_ledger_1d WHERE site_id = {site} AND bucket >= {first_day}"
        f" AND bucket < {end_day}{chosen}"
    )
    sums = ", ".join(f"SUM({f})" for f in FIGURES)
    day = f"bucket - bucket % {DAY_S}"
    cur.execute(
        f"INSERT INTO fw_ledger_1d ({', '.join(COLUMNS)}) SELECT site_id, {day}, node_id,"
        f" workload_id, state, {sums}, MAX(holders) FROM fw_ledger_1h WHERE site_id = {site}"
        f" AND bucket >= {first_day} AND bucket < {end_day}{chosen}"
        f" GROUP BY site_id, {day}, node_id, workload_id, state"
    )


def apply_intensity(cur: CursorWrapper, site_id: int, values: dict[int, float]) -> None:
    """Stored hours of `site_id` take the grid intensity just set for them (hour → gCO2/kWh):
    their energy becomes the series' part, at that value; their days are summed again. In
    the caller's transaction, with the values' own write."""
    energy = "gpu_j + node_j + over_j"
    cur.executemany(
        f"UPDATE fw_ledger_1h SET series_j = {energy}, series_g = ({energy}) / {J_PER_KWH!r} * %s"
        " WHERE site_id = %s AND bucket = %s",
        [(value, site_id, hour) for hour, value in values.items()],
    )
    for day in sorted({_floor(hour, DAY_S) for hour in values}):
        _resum_days(cur, site_id, day, day + DAY_S, "")


def _chosen(node_ids: tuple[int, ...] | None) -> str:
    """The rows a window of some nodes rewrites: theirs, and the site's own (node 0: IT no
    node reports, which every node's power changes)."""
    if node_ids is None:
        return ""
    chosen = ", ".join(str(int(n)) for n in node_ids) or "NULL"
    return f" AND (node_id IN ({chosen}) OR node_id = 0)"


def _hour_rows(site_id: int, found: Iterable[Part]) -> list[tuple[Any, ...]]:
    """The parts summed per hour, node, holder and state, as `COLUMNS`."""
    rows: dict[tuple[int, int, int, str], list[float]] = {}
    for p in found:
        key = (p.hour, p.node_id, p.workload_id, p.state)
        line, e = p.line, p.line.energy
        figures = (
            line.gpu_hours * HOUR_S,
            e.gpu_kwh * J_PER_KWH,
            e.node_kwh * J_PER_KWH,
            e.overhead_kwh * J_PER_KWH,
            line.estimated_hours * HOUR_S,
            line.resets,
            line.hours_without_pue * HOUR_S,
            line.series_kwh * J_PER_KWH,
            line.series_g,
        )
        have = rows.get(key)
        if have is None:
            rows[key] = [*figures, float(p.holders)]
        else:
            for i, value in enumerate(figures):
                have[i] += value
            have[-1] = max(have[-1], float(p.holders))
    return [
        (site_id, hour, node, wl, state, *figures[:-1], int(figures[-1]))
        for (hour, node, wl, state), figures in rows.items()
    ]


def _insert(cur: CursorWrapper, table: str, rows: list[tuple[Any, ...]]) -> None:
    if not rows:
        return
    marks = ", ".join(["%s"] * len(COLUMNS))
    cur.executemany(f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES ({marks})", rows)
