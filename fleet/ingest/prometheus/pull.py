"""Pull the dcgm-exporter series a fleet's Prometheus already holds into Fleetwatch.

One pull of one source (`pull_source`):

1. an instant query per pulled field, `max by (UUID, gpu, instance, <host labels>)
   (FIELD{<selector>})` (one series per GPU, only the labels that name it), and one for
   each scrape target's newest scrape time, which becomes the time of its values; a
   target whose newest scrape is already stored gives nothing new;
2. each series is matched to a GPU (fleet/ingest/prometheus/pull_match.py); one that matches
   none is recorded (`UnmatchedSeries`), GPUs whose node has a live agent are skipped
   (the agent wins), blanks and implausible values are dropped, units converted
   (fleet/ingest/prometheus/mapping.py); a change of the last XID becomes an XID event;
3. the pods the GPUs' series name (`pod`/`namespace`/`container`) become each node's
   workloads snapshot (fleet/ingest/prometheus/pull_pods.py);
4. everything is stored through the one write path, `write_samples`, with its latest-state
   delta, so pages, rules, rollups and allocation intervals see it like agent data.

A Prometheus that cannot be reached or answers an error marks the source down with the
error (`last_status`, `last_error`) and stores nothing: its GPUs age into "no data" like
a silent agent's.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from fleet.ingest.prometheus.mapping import XID_FIELD, convert, is_blank
from fleet.ingest.prometheus.pull_db import DjangoDb
from fleet.ingest.prometheus.pull_match import GpuRef, Labels, Matcher, identity, load_matcher
from fleet.ingest.prometheus.pull_pods import PodLabels
from fleet.ingest.prometheus.pull_query import Points, SourceDown, fetch_range, fetch_recent
from fleet.models import PrometheusSource, PulledGPU, UnmatchedSeries
from fleet.models.prometheus import PullStatus
from fleet.storage.db import Row
from fleet.storage.samples import (
    SampleWrite,
    drop_too_old,
    latest_delta,
    raw_horizon,
    write_samples,
)

log = logging.getLogger(__name__)


@dataclass
class Pulled:
    """What one pull made of the series it read."""

    write: SampleWrite = field(default_factory=SampleWrite)
    gpus: dict[int, GpuRef] = field(default_factory=dict)  # gpu_id → ref, stored
    xids: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # gpu_id → XIDs
    unmatched: dict[str, tuple[str, Labels, int]] = field(default_factory=dict)
    series: int = 0
    skipped_blank: int = 0
    skipped_agent: int = 0
    newest: float | None = None
    marks: dict[str, float] = field(default_factory=dict)  # instance → newest point read
    pod_gpus: int = 0  # GPUs given a pod from their labels

    def summary(self) -> dict[str, Any]:
        rows = sum(len(items) for items in self.write.samples.values())
        return {
            "series": self.series,
            "rows": rows,
            "gpus": len(self.gpus),
            "gpus_with_pod": self.pod_gpus,
            "unmatched": len(self.unmatched),
            "blank_or_implausible": self.skipped_blank,
            "agent_wins": self.skipped_agent,
            "xid_events": len(self.write.events),
        }


class Builder:
    """Matches, filters and converts series one by one into a `Pulled` (events later).

    `marks`: per scrape target (`instance`), the newest sample time already stored; older
    points are in storage (a target's scrapes land in order) and are not written again."""

    def __init__(self, matcher: Matcher, marks: dict[str, float]) -> None:
        self.matcher = matcher
        self.marks = marks
        self.out = Pulled()
        self.rows: dict[tuple[int, int, float], dict[str, Any]] = {}
        self.pods = PodLabels()

    def add(self, labels: Labels, points: Points) -> None:
        out = self.out
        out.series += 1
        ref = self.matcher.match(labels)
        if isinstance(ref, str):
            _unmatched(out, labels, self.matcher, ref)
            return
        if ref.node_id in self.matcher.agent_nodes:
            out.skipped_agent += 1
            return
        instance = labels.get("instance", "")
        stored = self.marks.get(instance, 0.0)
        fresh = [(ts, float(v)) for ts, v in ((float(t), v) for t, v in points) if ts > stored]
        if not fresh:
            return
        newest = fresh[-1][0]
        if newest > out.marks.get(instance, 0.0):
            out.marks[instance] = newest
        name = labels.get("__name__", "")
        if name == XID_FIELD:
            readings = [(ts, v) for ts, v in fresh if not is_blank(v)]
            if readings:
                out.xids.setdefault(ref.gpu_id, []).extend(readings)
                out.gpus[ref.gpu_id] = ref
            return
        rows = self.rows
        for ts, value in fresh:
            converted = convert(name, value)
            if converted is None:
                out.skipped_blank += 1
                continue
            key = (ref.node_id, ref.index, ts)
            sample = rows.get(key)
            if sample is None:
                sample = rows[key] = {"ts": ts, "gpu": ref.index}
            sample[converted[0]] = converted[1]
            out.gpus[ref.gpu_id] = ref

    def add_pods(self, labels: Labels, points: Points) -> None:
        """A series of `pod_query`'s answer: its GPU's pod, at its newest time not stored."""
        ref = self.matcher.match(labels)
        if isinstance(ref, str) or ref.node_id in self.matcher.agent_nodes:
            return  # the field series of an unmatched GPU are recorded already
        stored = self.marks.get(labels.get("instance", ""), 0.0)
        times = [float(t) for t, _ in points if float(t) > stored]
        if times:
            self.pods.add(ref, labels, max(times))

    def finish(self) -> Pulled:
        out, rows = self.out, self.rows
        if rows:
            out.write.add_samples("gpu", [((k[0], k[1]), s) for k, s in rows.items()])
            out.newest = max(k[2] for k in rows)
        out.write.workloads.extend(self.pods.snapshots(self.matcher.site_id))
        out.pod_gpus = self.pods.gpus()
        return out


def build(series: list[tuple[Labels, Points]], matcher: Matcher, marks: dict[str, float]) -> Pulled:
    """Match, filter and convert a list of series (a backfill's) into one `Pulled`."""
    builder = Builder(matcher, marks)
    for labels, points in series:
        builder.add(labels, points)
    return builder.finish()


def _unmatched(out: Pulled, labels: Labels, matcher: Matcher, reason: str) -> None:
    key = identity(labels, matcher.host_of(labels))
    found = out.unmatched.get(key)
    if found is None:
        kept = {k: v for k, v in labels.items() if k != "__name__"}
        out.unmatched[key] = (reason, kept, 1)
    else:
        out.unmatched[key] = (found[0], found[1], found[2] + 1)


def xid_events(
    source: PrometheusSource, pulled: Pulled, known: dict[int, int | None]
) -> tuple[list[Row], dict[int, int]]:
    """An XID event for each change of a GPU's last XID (and a first nonzero reading);
    returns the events and each GPU's last XID now."""
    events: list[Row] = []
    last: dict[int, int] = {}
    for gpu_id, readings in pulled.xids.items():
        ref = pulled.gpus[gpu_id]
        before = known.get(gpu_id)
        for ts, value in sorted(readings):
            code = int(value)
            if code != before and code != 0:
                # Keyed (source, seq, pos, ts): the same reading pulled twice is one event.
                detail = f"last XID {code} reported by dcgm-exporter via {source.origin}"
                row = (source.origin, int(ts * 1000), gpu_id, ts, ref.node_id, ref.index)
                events.append((*row, "xid", code, detail))
            before = code
        if before is not None:
            last[gpu_id] = before
    return events, last


def pull_source(source: PrometheusSource, now: float | None = None) -> dict[str, Any]:
    """Pull one source once; record its status. Never raises for a Prometheus that is down."""
    now = time.time() if now is None else now
    started = time.perf_counter()
    marks = source.watermarks if isinstance(source.watermarks, dict) else {}
    builder = Builder(load_matcher(source, now), marks)
    try:
        fetch_recent(source, now, builder.add, builder.add_pods)
    except SourceDown as exc:
        return mark_down(source, now, str(exc))
    fetched = time.perf_counter()
    summary = save(source, builder.finish(), now)
    summary["fetch_s"] = round(fetched - started, 3)  # queries, with matching overlapped
    summary["duration_s"] = round(time.perf_counter() - started, 3)
    source.last_summary = summary
    source.save(update_fields=["last_summary"])
    return summary


def store(
    source: PrometheusSource, series: list[tuple[Labels, Points]], now: float
) -> dict[str, Any]:
    """Store a backfill's series whole (what is stored already, storage ignores)."""
    return save(source, build(series, load_matcher(source, now), {}), now)


def save(source: PrometheusSource, pulled: Pulled, now: float) -> dict[str, Any]:
    """Through the one write path, with XID events and what became of each series."""
    started = time.perf_counter()
    known = known_gpus(source)
    events, last_xid = xid_events(source, pulled, {g: k[1] for g, k in known.items()})
    pulled.write.events.extend(events)
    # History older than raw retention is not stored raw (fleet.storage.samples): a long
    # backfill keeps only what the raw tier keeps, and says how much it left out.
    too_old = drop_too_old(pulled.write, raw_horizon(now))
    db = DjangoDb()
    db.transaction(lambda _tx: _commit(db, source, pulled, (known, last_xid), now))
    return pulled.summary() | {
        "older_than_raw_retention": sum(too_old.values()),
        "write_s": round(time.perf_counter() - started, 3),
    }


Known = dict[int, tuple[float, int | None]]  # gpu_id → (last_pulled, last_xid)
PULLED_EVERY_S = 60.0  # how often a PulledGPU's last_pulled is brought up to date


def known_gpus(source: PrometheusSource) -> Known:
    """The GPUs this source fed before: one read of its rows (no list of ids to bind)."""
    rows = PulledGPU.objects.filter(source=source).values_list("gpu_id", "last_pulled", "last_xid")
    return {gpu_id: (last_pulled, last_xid) for gpu_id, last_pulled, last_xid in rows}


def _commit(
    db: DjangoDb,
    source: PrometheusSource,
    pulled: Pulled,
    gpus: tuple[Known, dict[int, int]],
    now: float,
) -> None:
    """Samples, events, the pulled-GPU records and the source's status: all or nothing."""
    if pulled.write:
        write_samples(db, pulled.write, latest_delta(pulled.write, now))
    record_gpus(db, source, pulled, gpus, now)
    record_unmatched(source, pulled, now)
    source.last_pull_at = source.last_ok_at = now
    source.pull_interval_s = pull_interval_s()
    source.last_status = PullStatus.OK
    source.last_error = ""
    if pulled.newest is not None:
        source.last_sample_ts = max(pulled.newest, source.last_sample_ts or 0.0)
    source.watermarks = next_marks(source, pulled.marks, now)
    source.save(
        update_fields=[
            "last_pull_at",
            "last_ok_at",
            "pull_interval_s",
            "last_status",
            "last_error",
            "last_sample_ts",
            "watermarks",
        ]
    )


def pull_interval_s() -> float:
    """The interval sources are pulled at (`PROMETHEUS_PULL_S`, the beat's): what the data
    of the GPUs a source feeds is judged stale by (fleet/health/cadence.py)."""
    from django.conf import settings

    return float(settings.PROMETHEUS_PULL_S)


def next_marks(source: PrometheusSource, seen: dict[str, float], now: float) -> dict[str, float]:
    """The targets' newest stored points, forgetting targets silent past the look-back."""
    old = source.watermarks if isinstance(source.watermarks, dict) else {}
    keep = {k: v for k, v in old.items() if v > now - source.lookback_s}
    for instance, ts in seen.items():
        keep[instance] = max(ts, keep.get(instance, 0.0))
    return keep


def record_gpus(
    db: DjangoDb,
    source: PrometheusSource,
    pulled: Pulled,
    gpus: tuple[Known, dict[int, int]],
    now: float,
) -> None:
    """Which GPUs this source fed (where a page's figures came from; last_pulled to the
    minute) and their last XID. Writes only what changed: most pulls write nothing here."""
    known, last_xid = gpus
    new = [g for g in pulled.gpus if g not in known]
    PulledGPU.objects.bulk_create(
        [PulledGPU(source=source, gpu_id=g, first_pulled=now, last_pulled=now) for g in new],
        ignore_conflicts=True,
    )
    due = [g for g in pulled.gpus if g in known and known[g][0] < now - PULLED_EVERY_S]
    _update_ids(db, source, "last_pulled", now, due)
    changed: dict[int, list[int]] = defaultdict(list)
    for gpu_id, code in last_xid.items():
        if gpu_id not in known or known[gpu_id][1] != code:
            changed[code].append(gpu_id)
    for code, ids in changed.items():
        _update_ids(db, source, "last_xid", code, ids)


def _update_ids(
    db: DjangoDb, source: PrometheusSource, column: str, value: float, ids: list[int]
) -> None:
    """One UPDATE for many GPUs; the ids are integers from the database, written inline
    (binding thousands of parameters through the ORM cost more than the update)."""
    for start in range(0, len(ids), 10_000):
        inline = ",".join(str(int(g)) for g in ids[start : start + 10_000])
        where = f"source_id = %s AND gpu_id IN ({inline})"
        db.execute(f"UPDATE fleet_pulledgpu SET {column} = %s WHERE {where}", (value, source.pk))


def record_unmatched(source: PrometheusSource, pulled: Pulled, now: float) -> None:
    if not pulled.unmatched:
        return
    existing = {
        u.identity: u
        for u in UnmatchedSeries.objects.filter(source=source, identity__in=list(pulled.unmatched))
    }
    new, changed = [], []
    for key, (reason, labels, count) in pulled.unmatched.items():
        row = existing.get(key)
        if row is None:
            new.append(
                UnmatchedSeries(
                    source=source,
                    identity=key,
                    reason=reason[:300],
                    labels=labels,
                    metrics=count,
                    first_seen=now,
                    last_seen=now,
                )
            )
            continue
        row.reason, row.labels, row.metrics, row.last_seen = reason[:300], labels, count, now
        changed.append(row)
    UnmatchedSeries.objects.bulk_create(new, ignore_conflicts=True)
    UnmatchedSeries.objects.bulk_update(changed, ["reason", "labels", "metrics", "last_seen"])


def mark_down(source: PrometheusSource, now: float, error: str) -> dict[str, Any]:
    log.warning("prometheus source %s is down: %s", source.name, error)
    source.last_pull_at = now
    source.last_status = PullStatus.DOWN
    source.last_error = error
    source.last_summary = {"error": error}
    source.save(update_fields=["last_pull_at", "last_status", "last_error", "last_summary"])
    return {"error": error}


def pull_all(now: float | None = None) -> dict[str, dict[str, Any]]:
    """Every enabled source once; one source down does not stop the others."""
    return {s.name: pull_source(s, now) for s in PrometheusSource.objects.filter(enabled=True)}


MAX_STEPS_PER_QUERY = 1000  # points per series in one query_range (Prometheus allows 11,000)
MAX_STEPS = 20_000  # a whole backfill, per series


def backfill(source: PrometheusSource, start: float, end: float, step_s: float) -> dict[str, Any]:
    """Store [start, end] evaluated every `step_s`, in chunks of bounded points. Samples
    carry the step times (a range query evaluates; it does not return scrape times)."""
    if step_s <= 0:
        raise ValueError("the step must be positive")
    # Step-aligned times (like Grafana's): a second backfill lands on the same rows.
    start, end = math.ceil(start / step_s) * step_s, math.floor(end / step_s) * step_s
    steps = (end - start) / step_s
    if steps > MAX_STEPS:
        raise ValueError(f"{steps:.0f} steps per series: at most {MAX_STEPS}; use a larger step")
    totals: dict[str, Any] = {"series": 0, "rows": 0, "older_than_raw_retention": 0, "chunks": 0}
    chunk = step_s * MAX_STEPS_PER_QUERY
    at = start
    while at <= end:
        stop = min(end, at + chunk - step_s)
        try:
            series = fetch_range(source, at, stop, step_s)
        except SourceDown as exc:
            return mark_down(source, time.time(), str(exc)) | totals
        summary = store(source, series, time.time())
        totals["series"] = max(totals["series"], summary["series"])
        totals["rows"] += summary["rows"]
        totals["older_than_raw_retention"] += summary["older_than_raw_retention"]
        totals["chunks"] += 1
        at = stop + step_s
    return totals
