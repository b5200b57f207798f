"""Each source's own cadence, and the one judgement of whether a source has gone quiet.

A source declares how often it samples and how often it sends a batch (protocol
`cadence`, docs/protocol.md); the server keeps both per source (`SourceToken`) and a
Prometheus source is pulled every `PROMETHEUS_PULL_S` (`PrometheusSource.pull_interval_s`);
fleet/read/source_cadence.py finds each entity's interval.
Silence is counted in the source's own *batch* intervals: a facility agent that polls and
sends every 5 s has missed one batch 5 s after its last, not 1 s after. The "agent silent"
rules, `metric_lag_s`, the site strip's "agents stale" count and `/metrics` all judge a
source here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from fleet.health.levels import Level, Reading, newest_ts
from fleet.health.thresholds import STALE_AFTER_S

# What an agent that declares no cadence (one older than the field) is judged by: the
# default cadence of the agent that sends that kind of source. `fleet-agent` on a node
# samples and sends every second (agents/runconfig.py `interval_s`); a facility agent
# ticks at its targets' cadence, 10 s unless configured (agents/facility/config.py).
DEFAULT_INTERVAL_S: Mapping[str, float] = {
    "node": 1.0,
    "rack": 10.0,
    "loop": 10.0,
    "site": 10.0,
}
# A source's data is stale (it describes the past, not the present) once it is older than
# this many of its batch intervals, and never sooner than STALE_AFTER_S: a 1 s node is
# stale after 30 s, a source sending every 15 s after 45 s.
STALE_INTERVALS = 3.0
# A field that trails its entity's newest sample by fewer than this many of the source's
# batch intervals is still arriving at the source's own pace (`metric_lag_s` reports 0).
LAG_INTERVALS = 4.0


def batch_interval_s(kind: str, sample_s: float | None, batch_s: float | None) -> float:
    """Seconds between a source's batches: as it declared them (a batch every `batch_s`;
    an agent that declared only its sampling sends each sample), else its kind's default."""
    for declared in (batch_s, sample_s):
        if declared is not None and declared > 0:
            return float(declared)
    return DEFAULT_INTERVAL_S.get(kind, DEFAULT_INTERVAL_S["node"])


def silent_intervals(last_seen: float | None, now: float, interval_s: float) -> float | None:
    """How many of the source's batch intervals have passed since its last batch; None when
    it never reported (a source never enrolled is not silent, it is absent)."""
    if last_seen is None or interval_s <= 0:
        return None
    return max(0.0, now - last_seen) / interval_s


def stale_after_s(interval_s: float) -> float:
    """The age past which a source's newest data no longer describes the present."""
    return max(STALE_AFTER_S, STALE_INTERVALS * interval_s)


def source_stale(newest: float | None, now: float, interval_s: float) -> bool:
    """True when the source's newest data (or last batch) is `stale_after_s` of its
    interval old or older: at that age `Reading.fresh` and `stale` no longer count a value
    as fresh, so the site strip, `/metrics` and the pages agree to the second. A source
    never heard from is not stale here (callers count it as "never")."""
    return newest is not None and now - newest >= stale_after_s(interval_s)


def agents_stale_level(stale: int) -> Level:
    """A site's agents: any gone stale is a warning (their racks read "No data" too)."""
    return Level.WARN if stale else Level.OK


def lag_beyond_cadence(lag_s: float, interval_s: float) -> float:
    """A field's lag in seconds, or 0 while it is within `LAG_INTERVALS` of the source's
    batch interval (a field arriving at the source's own pace has not stopped)."""
    return lag_s if lag_s >= LAG_INTERVALS * interval_s else 0.0


class Pace(NamedTuple):
    """How often an entity's source sends (its batch interval) and the fields it declared
    it refreshes less often (`cadence.fields_s`: metric → seconds)."""

    interval_s: float
    fields_s: Mapping[str, float]


def slow_field_lag(reading: Reading, now: float, pace: Pace) -> float | None:
    """`field_lag` for a source that declared slower fields: the most-lagging field's lag,
    counting only a field at least `LAG_INTERVALS` of its own interval (its declared one,
    else the source's batch interval) behind the entity's newest sample; 0 when every field
    keeps its pace; None when the entity is stale by the source's cadence (silence)."""
    newest = newest_ts(reading)
    if newest is None or max(0.0, now - newest) >= stale_after_s(pace.interval_s):
        return None
    fields = pace.fields_s
    worst = 0.0
    for name, ts in reading.ts.items():
        lag = newest - ts
        own = LAG_INTERVALS * max(pace.interval_s, fields.get(name, 0.0))
        if lag > worst and lag >= own and name in reading.values:
            worst = lag
    return worst
