"""Each GPU's health record for a site (and each node's, folded from its GPUs): the facts
`fleet.health.record.judge` needs, read set-based in a few queries per site — the site's
GPUs, their latest state, their XID and off-the-bus events, the resets and thermal time
the 1m/1h tiers show, each GPU's last hour against its peers (fleet/read/health_record_sql.py)
— and the verdict on each.

A reset or driver reload is seen where a counter the driver starts again went down
(`RESET_COUNTERS`); the tier's bucket is as close as it is known, so an event inside the
reset's bucket counts as before it. Hours the hourly GPU rollup has passed are read from the
GPUs' health hours it keeps (fleet/storage/health_hours.py: sparse, a few rows per GPU that
had anything); the hours after, from the tiers — the 1m tier as far back as it is kept, the
1h tier before that.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from django.conf import settings

from agents.protocol.memory import RESET_EVENTS
from fleet import health
from fleet.health import peers as hp
from fleet.health import record as hr
from fleet.models import Event
from fleet.read import health_memory as memory
from fleet.read import health_record_sql as sql
from fleet.read.state import latest_readings, select_rows
from fleet.storage.schema import TIER_SECONDS

GpuKey = tuple[int, int]  # (node id, GPU index)


@dataclass(frozen=True, slots=True)
class GpuRecord:
    """One GPU: who it is (as a vendor's RMA form asks), its facts and the verdict."""

    gpu_id: int
    node_id: int
    node: str
    index: int
    model: str
    uuid: str
    serial: str
    pci_bus_id: str
    rack: str
    hall: str
    slowdown_c: float | None  # the slowdown limit in force (entered, else reported)
    facts: hr.GpuFacts
    verdict: hr.Verdict

    @property
    def key(self) -> GpuKey:
        return (self.node_id, self.index)

    @property
    def state(self) -> str:
        return self.verdict.state

    @property
    def first_seen(self) -> float | None:
        """The earliest evidence in the record: XIDs and off-the-bus episodes."""
        times = [x.first_ts for x in self.facts.xids] + list(self.facts.off_the_bus)
        return min(times, default=None)

    @property
    def last_seen(self) -> float | None:
        times = [x.last_ts for x in self.facts.xids] + list(self.facts.off_the_bus)
        return max(times, default=None)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    node_id: int
    node: str
    state: str  # its worst GPU's
    counts: dict[str, int]  # GPUs per state


def site_records(site_id: int, now: float) -> list[GpuRecord]:
    """Every inventoried GPU of the site with its record, worst state first, then by node
    and index."""
    gpus = _site_gpus(site_id)
    if not gpus:
        return []
    node_ids = sorted({g["node_id"] for g in gpus})
    readings = latest_readings("gpu", node_ids)
    lo = int(now - hr.RECORD_WINDOW_S)
    tallies = gpu_tallies(node_ids, lo, now)
    events = _events(node_ids, lo)
    peers = peer_comparisons(gpus, now)
    out = []
    for g in gpus:
        key = (g["node_id"], g["index"])
        reading = readings.get(key, health.EMPTY)
        tally = tallies.get(key, Tally()).known(reading, g["slowdown_c"])
        facts = gpu_facts(reading, tally, events.get(key, []), peers.get(key), g["memory"])
        out.append(GpuRecord(facts=facts, verdict=hr.judge(facts, now), **_who(g)))
    out.sort(key=lambda r: (-hr.STATES.index(r.state), r.node, r.index))
    return out


def node_records(records: Iterable[GpuRecord]) -> list[NodeRecord]:
    """Each node's state (its worst GPU's) and its GPUs per state."""
    by_node: dict[int, list[GpuRecord]] = {}
    for r in records:
        by_node.setdefault(r.node_id, []).append(r)
    return [
        NodeRecord(
            node_id,
            rs[0].node,
            hr.worst_state(r.state for r in rs),
            dict(hr.state_counts(r.state for r in rs)),
        )
        for node_id, rs in sorted(by_node.items(), key=lambda item: item[1][0].node)
    ]


def gpu_record(gpu_id: int, now: float) -> GpuRecord | None:
    """One GPU's record (the GPU page's), read as its site's is, for its node only (and
    its rack, for its peers)."""
    rows = select_rows(_GPUS + " WHERE g.id = %s", [gpu_id])
    if not rows:
        return None
    g = _identity(rows[0])
    node_ids = [g["node_id"]]
    key = (g["node_id"], g["index"])
    lo = int(now - hr.RECORD_WINDOW_S)
    reading = latest_readings("gpu", node_ids).get(key, health.EMPTY)
    facts = gpu_facts(
        reading,
        gpu_tallies(node_ids, lo, now).get(key, Tally()).known(reading, g["slowdown_c"]),
        _events(node_ids, lo).get(key, []),
        peer_comparisons(_rack_gpus(g["node_id"]), now).get(key),
        g["memory"],
    )
    return GpuRecord(facts=facts, verdict=hr.judge(facts, now), **_who(g))


# -- facts from what was read ------------------------------------------------------------

Happened = tuple[float, str, int | None]  # (ts, kind, code) of an xid or gpu_lost event
Thermal = tuple[float | None, int | None]  # (slowdown ns, excursions)


@dataclass(frozen=True, slots=True)
class Tally:
    """What a GPU's record adds up over its window: resets and driver reloads (how many,
    the end of the last one's bucket), thermal slowdown (ns; None: no slowdown counter
    seen) and runs of hours past its slowdown limit (None: no limit known)."""

    resets: int = 0
    last_reset: float | None = None
    slowdown_ns: float | None = None
    excursions: int | None = None

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            self.resets + other.resets,
            _latest(self.last_reset, other.last_reset),
            _sum(self.slowdown_ns, other.slowdown_ns),
            _sum(self.excursions, other.excursions),
        )

    def known(self, reading: health.Reading, slowdown_c: float | None) -> Tally:
        """Zero, not "not reported", for what the GPU reports but had none of: its health
        hours keep a row only for an hour that had something."""
        reports = any(reading.values.get(m) is not None for m in _SLOWDOWN_COUNTERS)
        return Tally(
            self.resets,
            self.last_reset,
            0.0 if self.slowdown_ns is None and reports else self.slowdown_ns,
            0 if self.excursions is None and slowdown_c is not None else self.excursions,
        )


_SLOWDOWN_COUNTERS = ("slowdown_sw_thermal_ns", "slowdown_hw_thermal_ns")
_N = TypeVar("_N", int, float)


def _sum(a: _N | None, b: _N | None) -> _N | None:
    if a is None:
        return b
    return a if b is None else a + b


def _latest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def gpu_facts(
    reading: health.Reading,
    tally: Tally,
    events: Sequence[Happened],
    peers: hp.PeerComparison | None = None,
    sent: dict[str, Any] | None = None,
) -> hr.GpuFacts:
    """One GPU's facts: XIDs count from its last reset (`tally.last_reset`, the end of the
    bucket it was seen in, or the agent's reset event). `peers`: its last hour against its
    peers; `sent`: the memory-error facts its agent sent (health_memory.memory_facts)."""
    resets, last_reset = memory.resets(
        tally.resets, tally.last_reset, (e[0] for e in events if memory.is_reset(e[1]))
    )
    since = [e for e in events if last_reset is None or e[0] >= last_reset]
    before = [e for e in events if last_reset is not None and e[0] < last_reset]
    off_bus = [t for t, kind, code in events if _off_the_bus(kind, code)]
    v = reading.values
    ns = tally.slowdown_ns
    return hr.GpuFacts(
        xids=xid_counts(since),
        reset_xids_before_reset=frozenset(
            c for _, k, c in before if k == "xid" and c in hr.RESET_XIDS
        ),
        last_reset_ts=last_reset,
        resets=resets,
        off_the_bus=hr.episodes(off_bus),
        ecc_sbe_volatile=_int(v.get("ecc_sbe_vol_total")),
        ecc_dbe_volatile=_int(v.get("ecc_dbe_vol_total")),
        remapped_correctable=_int(v.get("remapped_rows_correctable")),
        remapped_uncorrectable=_int(v.get("remapped_rows_uncorrectable")),
        remap_pending=_flag(v.get("remap_pending")),
        remap_failure=_flag(v.get("remap_failure")),
        thermal_slowdown_h=None if ns is None else ns / 1e9 / 3600,
        thermal_excursions=tally.excursions,
        peers=peers,
        **(sent or {}),
    )


def xid_counts(events: Iterable[Happened]) -> tuple[hr.XidCount, ...]:
    """XIDs by code: how many, first and last seen; most frequent first."""
    seen: dict[int, list[float]] = {}
    for ts, kind, code in events:
        if kind == "xid" and code is not None:
            seen.setdefault(int(code), []).append(ts)
    counts = [hr.XidCount(code, len(ts), min(ts), max(ts)) for code, ts in seen.items()]
    return tuple(sorted(counts, key=lambda x: (-x.count, x.code)))


def _off_the_bus(kind: str, code: int | None) -> bool:
    return kind == "gpu_lost" or (kind == "xid" and code == health.OFF_THE_BUS_XID)


def _int(value: float | int | None) -> int | None:
    return None if value is None else int(value)


def _flag(value: float | int | None) -> bool | None:
    return None if value is None else bool(value)


# -- reads --------------------------------------------------------------------------------

_GPUS = (
    'SELECT g.id, n.id, n.name, g."index", g.model, g.uuid, g.info, k.name, h.name,'
    " COALESCE(g.slowdown_c, g.reported_slowdown_c)"
    " FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
    " JOIN fleet_rack k ON k.id = n.rack_id JOIN fleet_hall h ON h.id = k.hall_id"
)


def _site_gpus(site_id: int) -> list[dict[str, Any]]:
    rows = select_rows(_GPUS + " WHERE h.site_id = %s", [site_id])
    return [_identity(row) for row in rows]


def _rack_gpus(node_id: int) -> list[dict[str, Any]]:
    """Every GPU in the node's rack (its possible peers, and its own)."""
    where = " WHERE n.rack_id = (SELECT rack_id FROM fleet_node WHERE id = %s)"
    return [_identity(row) for row in select_rows(_GPUS + where, [node_id])]


def _who(g: dict[str, Any]) -> dict[str, Any]:
    """The GPU's identity for its GpuRecord (without what its agent sent)."""
    return {k: v for k, v in g.items() if k != "memory"}


def _identity(row: Sequence[Any]) -> dict[str, Any]:
    info = row[6]
    if isinstance(info, str):  # SQLite hands JSON back as text
        info = json.loads(info or "{}")
    info = info if isinstance(info, dict) else {}
    return {
        "gpu_id": row[0],
        "node_id": row[1],
        "node": row[2],
        "index": row[3],
        "model": row[4] or str(info.get("model", "")),
        "uuid": row[5] or str(info.get("uuid", "")),
        "serial": str(info.get("serial", "")),
        "pci_bus_id": str(info.get("pci_bus_id", "")),
        "rack": row[7],
        "hall": row[8],
        "slowdown_c": None if row[9] is None else float(row[9]),
        "memory": memory.memory_facts(info),
    }


def gpu_tallies(node_ids: Sequence[int], lo: int, now: float) -> dict[GpuKey, Tally]:
    """Each GPU's tally over [lo, now]: the health hours the hourly rollup has passed, the
    tiers after them."""
    stored_until = min(max(_hours_done(), lo), int(now))
    out = _stored_tallies(node_ids, lo, stored_until)
    live: dict[GpuKey, Tally] = {}
    for key, times in reset_times(node_ids, stored_until, now).items():
        live[key] = Tally(resets=len(times), last_reset=times[-1])
    for key, (ns, runs) in _thermal(node_ids, stored_until, now).items():
        live[key] = live.get(key, Tally()) + Tally(slowdown_ns=ns, excursions=runs)
    for key, tally in live.items():
        out[key] = out.get(key, Tally()) + tally
    return out


def _hours_done() -> int:
    """How far the hourly GPU rollup has got: its health hours are complete before it."""
    rows = select_rows("SELECT done_until FROM fw_rollup_state WHERE tier = '1h' AND kind = 'gpu'")
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def _stored_tallies(node_ids: Sequence[int], lo: int, hi: int) -> dict[GpuKey, Tally]:
    if lo >= hi:
        return {}
    rows = select_rows(sql.stored_hours_sql(node_ids, lo, hi))
    return {
        (node_id, gpu): Tally(
            int(resets or 0),
            None if last is None else float(last),
            None if ns is None else float(ns),
            None if starts is None else int(starts),
        )
        for node_id, gpu, resets, last, ns, starts in rows
    }


def minute_tier_from(now: float) -> int:
    """Where the 1m tier takes over from the 1h tier: the hour boundary after the oldest
    minute it keeps."""
    oldest = now - float(settings.RETENTION_1M_HOURS) * 3600
    return int(oldest // 3600 + 1) * 3600


def reset_times(node_ids: Sequence[int], lo: int, now: float) -> dict[GpuKey, list[float]]:
    """The end of each bucket of [lo, now] in which a GPU of the nodes was reset or its
    driver reloaded, oldest first: from the 1h tier before the 1m tier's reach, from the
    1m tier after. Each bucket is compared with the one before it, read too."""
    split = max(lo, minute_tier_from(now))
    out: dict[GpuKey, list[float]] = {}
    for tier, a, b in (("1h", lo, split), ("1m", split, int(now) + 60)):
        if a >= b:
            continue
        step = TIER_SECONDS[tier]
        for node_id, gpu, bucket in select_rows(
            sql.resets_sql(tier, node_ids, a - step, b, count_from=a)
        ):
            out.setdefault((node_id, gpu), []).append(float(bucket + step))
    for times in out.values():
        times.sort()
    return out


def _events(node_ids: Sequence[int], lo: int) -> dict[GpuKey, list[Happened]]:
    rows = (
        Event.objects.filter(
            node_id__in=node_ids,
            gpu_index__isnull=False,
            ts__gte=lo,
            kind__in=("xid", "gpu_lost", *RESET_EVENTS),
        )
        .order_by("ts")
        .values_list("node_id", "gpu_index", "ts", "kind", "code")
    )
    out: dict[GpuKey, list[Happened]] = {}
    for node_id, gpu, ts, kind, code in rows:
        if node_id is not None and gpu is not None:
            out.setdefault((node_id, gpu), []).append((ts, kind, code))
    return out


def _thermal(node_ids: Sequence[int], lo: int, now: float) -> dict[GpuKey, Thermal]:
    """Thermal slowdown and excursions of the hours from `lo`'s, each hour judged against
    the one before it (read too)."""
    hour = lo // 3600 * 3600
    rows = select_rows(sql.thermal_sql(node_ids, hour - 3600, int(now) + 3600, count_from=hour))
    return {
        (node_id, gpu): (None if ns is None else float(ns), None if runs is None else int(runs))
        for node_id, gpu, ns, runs, _hours in rows
    }


def peer_comparisons(gpus: Sequence[dict[str, Any]], now: float) -> dict[GpuKey, hp.PeerComparison]:
    """Each GPU's last complete hour of minutes against the same model in its rack at
    similar power, where it has enough minutes and peers (fleet.health.peers)."""
    if not gpus:
        return {}
    hi = int(now // 60) * 60  # the minute under way is not complete
    node_ids = sorted({g["node_id"] for g in gpus})
    rows = select_rows(sql.peers_sql(node_ids, hi - hp.PEER_WINDOW_S, hi))
    found = hp.compare(gpu_hours(gpus, rows))
    return {cast(GpuKey, k): v for k, v in found.items()}


def gpu_hours(gpus: Sequence[dict[str, Any]], rows: Iterable[Sequence[Any]]) -> list[hp.GpuHour]:
    """The GPUs' hours from `peers_sql`'s rows, each grouped by hall, rack and model (GPUs
    without a row have no hour)."""
    by_key = {(row[0], row[1]): row[2:] for row in rows}
    hours = []
    for g in gpus:
        key = (g["node_id"], g["index"])
        if key not in by_key:
            continue
        minutes, temp, power, known, slowed = by_key[key]
        hours.append(
            hp.GpuHour(
                key=key,
                group=(g["hall"], g["rack"], g["model"]),
                minutes=int(minutes or 0),
                temp_c=None if temp is None else float(temp),
                power_w=None if power is None else float(power),
                reason_minutes=int(known or 0),
                throttled_minutes=int(slowed or 0),
            )
        )
    return hours
