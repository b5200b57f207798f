"""Pull the dcgm-exporter series a fleet's Prometheus already holds into Fleetwatch.

One pull of one source (`pull_source`):

1. one instant query of a range selector, `{__name__=~"<mapped fields>",<selector>}[Ns]`,
   which returns each series' raw samples with the times Prometheus scraped them (an
   instant vector would carry the query's time instead). N reaches back to just before
   the newest sample the previous pull stored (at most the source's `lookback_s`), so
   nothing is fetched twice but a few seconds of overlap, which storage ignores;
2. each series is matched to a GPU (fleet/prometheus/pull_match.py); one that matches
   none is recorded (`UnmatchedSeries`), GPUs whose node has a live agent are skipped
   (the agent wins), blanks and implausible values are dropped, units converted
   (fleet/prometheus/mapping.py); a change of the last XID becomes an XID event;
3. everything is stored through the one write path, `write_samples`, with its latest-state
   delta, so pages, rules and rollups see it like agent data.

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

import requests
from prometheus_api_client import PrometheusConnect

from fleet.models import PrometheusSource, PulledGPU, UnmatchedSeries
from fleet.models.prometheus import PullStatus
from fleet.prometheus.mapping import XID_FIELD, convert, is_blank, metric_regex
from fleet.prometheus.pull_db import DjangoDb
from fleet.prometheus.pull_match import GpuRef, Labels, Matcher, identity, load_matcher
from fleet.storage.db import Row
from fleet.storage.samples import SampleWrite, latest_delta, write_samples

log = logging.getLogger(__name__)

Points = list[tuple[float, float]]  # (sample time, value) in time order
QUERY_TIMEOUT_S = 10
OVERLAP_S = 5.0  # re-read this much before the last stored sample (late scrapes)


class SourceDown(Exception):
    """The source's Prometheus did not answer, or answered an error."""


@dataclass
class Pulled:
    """What one pull made of the series it read."""

    write: SampleWrite = field(default_factory=SampleWrite)
    gpus: dict[int, GpuRef] = field(default_factory=dict)  # gpu_id → ref, stored
    xids: dict[int, Points] = field(default_factory=dict)  # gpu_id → last-XID readings
    unmatched: dict[str, tuple[str, Labels, int]] = field(default_factory=dict)
    series: int = 0
    skipped_blank: int = 0
    skipped_agent: int = 0
    newest: float | None = None

    def summary(self) -> dict[str, Any]:
        rows = sum(len(items) for items in self.write.samples.values())
        return {
            "series": self.series,
            "rows": rows,
            "gpus": len(self.gpus),
            "unmatched": len(self.unmatched),
            "blank_or_implausible": self.skipped_blank,
            "agent_wins": self.skipped_agent,
            "xid_events": len(self.write.events),
        }


def client_for(source: PrometheusSource) -> PrometheusConnect:
    headers = {"Authorization": f"Bearer {source.bearer_token}"} if source.bearer_token else None
    auth = (source.basic_user, source.basic_password) if source.basic_user else None
    return PrometheusConnect(
        url=source.url.rstrip("/"),
        headers=headers,
        auth=auth,
        disable_ssl=not source.verify_tls,
        timeout=QUERY_TIMEOUT_S,
    )


def selector(source: PrometheusSource) -> str:
    extra = source.selector.strip().strip("{}").strip()
    matchers = f'__name__=~"{metric_regex()}"'
    return "{" + matchers + (f",{extra}" if extra else "") + "}"


def window_s(source: PrometheusSource, now: float) -> int:
    """Seconds to read back: to just before the last stored sample, at most lookback_s."""
    lookback = max(1, int(source.lookback_s))
    if source.last_sample_ts is None:
        return lookback
    since = now - source.last_sample_ts + OVERLAP_S
    return max(1, min(lookback, math.ceil(since)))


def fetch_recent(source: PrometheusSource, now: float) -> list[tuple[Labels, Points]]:
    """Each pulled series' samples of the last window, with their scrape times."""
    query = f"{selector(source)}[{window_s(source, now)}s]"
    result = _ask(lambda c: c.custom_query(query, params={"time": now}), source)
    return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in result]


def fetch_range(
    source: PrometheusSource, start: float, end: float, step_s: float
) -> list[tuple[Labels, Points]]:
    """Each pulled series evaluated every `step_s` over [start, end] (a backfill)."""
    import datetime as dt

    def query(c: PrometheusConnect) -> Any:
        return c.custom_query_range(
            selector(source),
            start_time=dt.datetime.fromtimestamp(start, dt.UTC),
            end_time=dt.datetime.fromtimestamp(end, dt.UTC),
            step=f"{step_s:g}s",
        )

    result = _ask(query, source)
    return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in result]


def _ask(call: Any, source: PrometheusSource) -> Any:
    try:
        return call(client_for(source))
    except requests.exceptions.RequestException as exc:
        raise SourceDown(f"cannot reach {source.url}: {_short(exc)}") from exc
    except Exception as exc:  # the client raises its own errors for non-2xx answers
        raise SourceDown(f"{source.url} answered an error: {_short(exc)}") from exc


def _short(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}"[:500]


def build(series: list[tuple[Labels, Points]], matcher: Matcher) -> Pulled:
    """Match, filter and convert the series into one SampleWrite (events added later)."""
    out = Pulled(series=len(series))
    rows: dict[tuple[int, int, float], dict[str, Any]] = {}
    for labels, points in series:
        name = labels.get("__name__", "")
        ref = matcher.match(labels)
        if isinstance(ref, str):
            _unmatched(out, labels, matcher, ref)
            continue
        if ref.node_id in matcher.agent_nodes:
            out.skipped_agent += 1
            continue
        if name == XID_FIELD:
            readings = [(ts, v) for ts, v in points if not is_blank(v)]
            if readings:
                out.xids.setdefault(ref.gpu_id, []).extend(readings)
                out.gpus[ref.gpu_id] = ref
            continue
        for ts, value in points:
            converted = convert(name, value)
            if converted is None:
                out.skipped_blank += 1
                continue
            metric, number = converted
            key = (ref.node_id, ref.index, ts)
            sample = rows.get(key)
            if sample is None:
                sample = rows[key] = {"ts": ts, "gpu": ref.index}
            sample[metric] = number
            out.gpus[ref.gpu_id] = ref
    if rows:
        out.write.add_samples("gpu", [((k[0], k[1]), s) for k, s in rows.items()])
        out.newest = max(k[2] for k in rows)
    return out


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
    try:
        series = fetch_recent(source, now)
    except SourceDown as exc:
        return mark_down(source, now, str(exc))
    summary = store(source, series, now)
    summary["duration_s"] = round(time.perf_counter() - started, 3)
    source.last_summary = summary
    source.save(update_fields=["last_summary"])
    return summary


def store(
    source: PrometheusSource, series: list[tuple[Labels, Points]], now: float
) -> dict[str, Any]:
    """Store pulled series through the one write path and record what became of them."""
    matcher = load_matcher(source, now)
    pulled = build(series, matcher)
    known = dict(
        PulledGPU.objects.filter(source=source, gpu_id__in=list(pulled.xids)).values_list(
            "gpu_id", "last_xid"
        )
    )
    events, last_xid = xid_events(source, pulled, known)
    pulled.write.events.extend(events)
    db = DjangoDb()
    db.transaction(lambda _tx: _commit(db, source, pulled, last_xid, now))
    return pulled.summary()


def _commit(
    db: DjangoDb, source: PrometheusSource, pulled: Pulled, last_xid: dict[int, int], now: float
) -> None:
    """Samples, events, the pulled-GPU records and the source's status: all or nothing."""
    if pulled.write:
        write_samples(db, pulled.write, latest_delta(pulled.write, now))
    record_gpus(source, pulled, last_xid, now)
    record_unmatched(source, pulled, now)
    source.last_pull_at = source.last_ok_at = now
    source.last_status = PullStatus.OK
    source.last_error = ""
    if pulled.newest is not None:
        source.last_sample_ts = max(pulled.newest, source.last_sample_ts or 0.0)
    source.save(
        update_fields=["last_pull_at", "last_ok_at", "last_status", "last_error", "last_sample_ts"]
    )


def record_gpus(
    source: PrometheusSource, pulled: Pulled, last_xid: dict[int, int], now: float
) -> None:
    """Which GPUs this source fed (where a page's figures came from), and their last XID."""
    ids = list(pulled.gpus)
    if not ids:
        return
    existing = set(
        PulledGPU.objects.filter(source=source, gpu_id__in=ids).values_list("gpu_id", flat=True)
    )
    PulledGPU.objects.bulk_create(
        [
            PulledGPU(source=source, gpu_id=g, first_pulled=now, last_pulled=now)
            for g in ids
            if g not in existing
        ],
        ignore_conflicts=True,
    )
    PulledGPU.objects.filter(source=source, gpu_id__in=ids).update(last_pulled=now)
    by_code: dict[int, list[int]] = defaultdict(list)
    for gpu_id, code in last_xid.items():
        by_code[code].append(gpu_id)
    for code, gpu_ids in by_code.items():
        PulledGPU.objects.filter(source=source, gpu_id__in=gpu_ids).update(last_xid=code)


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
    steps = (end - start) / step_s
    if step_s <= 0 or steps > MAX_STEPS:
        raise ValueError(f"{steps:.0f} steps per series: at most {MAX_STEPS}; use a larger step")
    totals: dict[str, Any] = {"series": 0, "rows": 0, "chunks": 0}
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
        totals["chunks"] += 1
        at = stop + step_s
    return totals
