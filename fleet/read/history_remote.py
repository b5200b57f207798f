"""History older than local raw retention, read back from the site's TSDB with PromQL.

Remote write (fleet/remote_write/) ships raw samples to a Prometheus-compatible TSDB; with
`FLEETWATCH_REMOTE_READ_URL` set, a history range that starts before local raw retention is
read from there instead of the rollups, at the resolution the chart can draw: one bucket per
`step` (the range over at most `max_points - 1`, and never more than the 11,000 points a
Prometheus range query returns, prometheus/prometheus:web/api/v1/api.go), each bucket's mean,
min and max over its raw samples (`avg_over_time`, `min_over_time`, `max_over_time` of the
entity's series, `prometheus-api-client`'s `custom_query_range`). The answer's tier is
`tsdb`. It ends where the shipper has got to (a minute or two before now).

A TSDB that does not answer, or answers with an error, leaves the range to the rollups as
before; the answer then says so (`History.note`).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import requests
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from fleet.remote_write import series
from fleet.storage.retention import kept_s

if TYPE_CHECKING:
    from fleet.read.history import History

__all__ = ("MAX_TSDB_POINTS", "TSDB", "Answer", "from_tsdb", "tsdb_step", "wanted")

log = logging.getLogger(__name__)

TSDB = "tsdb"  # the tier name of an answer from the TSDB
# A Prometheus range query returns at most this many points per series (api.go).
MAX_TSDB_POINTS = 11_000
# One query's timeout: a page waits for three per metric at most.
QUERY_TIMEOUT_S = 10
FALLBACK_NOTE = "the TSDB did not answer ({why}): read from the rollups"
# The labels that place an entity's series; a GPU's UUID is left out so that a GPU swapped
# in the same slot reads as one history (the index's), as the local tiers keep it.
_SELECTOR_LABELS = {k: tuple(n for n in names if n != "uuid") for k, names in series.LABELS.items()}


@dataclass(frozen=True)
class Answer:
    history: History | None  # None: read locally
    note: str = ""  # why the TSDB was wanted and did not answer


def wanted(kind: str, start: float, now: float) -> bool:
    """A TSDB is configured and the range starts before what the raw tier keeps."""
    return bool(settings.REMOTE_WRITE.read_url) and start < now - kept_s("raw", kind)


def tsdb_step(start: float, end: float, max_points: int) -> int:
    """Whole seconds per bucket: at most `max_points` buckets and `MAX_TSDB_POINTS`."""
    span = end - start
    return max(1, math.ceil(span / (max_points - 1)), math.ceil(span / MAX_TSDB_POINTS))


def _selector(kind: str, field: str, place: Sequence[tuple[str, str]]) -> str:
    wanted_labels = _SELECTOR_LABELS[kind]
    matchers = [f'__name__="{series.metric_name(kind, field)}"']
    for name, value in place:
        if name in wanted_labels:
            escaped = value.replace("\\", "\\\\").replace('"', '\\"')
            matchers.append(f'{name}="{escaped}"')
    return "{" + ", ".join(matchers) + "}"


def _points(result: list[dict[str, object]], step: int) -> dict[int, float]:
    """A range query's one series as {bucket start: value} (evaluated at each bucket's end)."""
    if not result:
        return {}
    values = result[0]["values"]
    assert isinstance(values, list)
    return {int(float(t)) - step: float(v) for t, v in values}


def from_tsdb(
    kind: str,
    key: tuple[int, ...],
    metrics: Sequence[str],
    start: float,
    end: float,
    max_points: int,
    *,
    now: float,
    using: str = DEFAULT_DB_ALIAS,
) -> Answer:
    """The range from the TSDB when it is `wanted`; else, or when it fails, no history."""
    if not wanted(kind, start, now):
        return Answer(None)
    from fleet.read.history import History, Series  # it builds on history's own types

    place = series.labels_of(kind, key, series.entity_labels(kind, using))
    if not place:
        return Answer(None)
    step = tsdb_step(start, end, max_points)
    first = math.floor(start / step) * step
    client = PrometheusConnect(
        url=settings.REMOTE_WRITE.read_url.rstrip("/"),
        headers=settings.REMOTE_WRITE.headers(),
        retry=Retry(total=0),
        timeout=QUERY_TIMEOUT_S,
    )
    at = dt.datetime.fromtimestamp(first + step, dt.UTC), dt.datetime.fromtimestamp(end, dt.UTC)
    found: dict[str, Series] = {}
    try:
        for name in metrics:
            # Evaluated at each bucket's end; `offset 1ms` turns the window (end - step, end]
            # into [start, end), as the local tiers bucket (millisecond timestamps).
            selector = f"{_selector(kind, name, place)}[{step}s] offset 1ms"
            stats = [
                _points(
                    client.custom_query_range(f"{fn}({fn}_over_time({selector}))", *at, f"{step}s"),
                    step,
                )
                for fn in ("avg", "min", "max")
            ]
            buckets = sorted(stats[0])
            found[name] = Series(
                metric=name,
                points=[(float(b), stats[0][b]) for b in buckets],
                min=[stats[1].get(b) for b in buckets],
                max=[stats[2].get(b) for b in buckets],
            )
    except (PrometheusApiClientException, requests.RequestException, ValueError, KeyError) as exc:
        why = f"{type(exc).__name__}: {exc}"[:200]
        log.warning("history of %s %s from the TSDB failed: %s", kind, key, why)
        return Answer(None, FALLBACK_NOTE.format(why=why))
    return Answer(History(kind, key, TSDB, step, start, end, found, [(TSDB, start, end)]))
