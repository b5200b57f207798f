"""The time-to-limit signals (fleet/alerts/signals.py, `forecast:<subject>`): minutes until
each rack's, feed's, feed pair's (N+1), loop's or GPU's forecast reaches its limit, and the
database's disk's (the same value for every site: the database serves them all), from
this minute's forecasts as the `fleet.forecasts` task last stored them
(fleet/read/forecast_now.py: the rules' 10 s evaluation only reads them, never computes).

A subject without a forecast has no value: the rule's instance, if any, resolves
(`absent_clears`). A new instance is labelled with the crossing it announces — `crossing`
("2026-12-06 14:42 UTC"), `forecast` (the page's sentence) and `limit` ("45 kW") — which
its summary may name; they are fixed when it starts, as its place is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from fleet.models import Site
from fleet.read.forecast import Forecast
from fleet.read.forecast_now import disk_now, forecasts_now
from fleet.read.forecast_sources import LimitForecast, sentence
from fleet.words import utc_minute

if TYPE_CHECKING:
    from fleet.alerts.evaluate_state import Snapshot, Values
    from fleet.alerts.models import AlertInstance

__all__ = ("PREFIX", "forecasts", "label_forecasts", "minutes_to_limit")

PREFIX = "forecast:"
_Found = dict[tuple[str, tuple[int, ...]], LimitForecast]


def forecasts(snap: Snapshot) -> _Found:
    """Every site's forecasts that reach their limit, by (subject, the entity's key among
    the rule's values: `LimitForecast.rule_key`): read once per evaluation, and only when a
    forecast rule is enabled."""

    def make() -> _Found:
        found: _Found = {}
        disk = disk_now(snap.now)
        shared = disk.forecast if disk is not None else None
        for site_id in Site.objects.values_list("pk", flat=True):
            for item in forecasts_now(site_id, snap.now):
                if isinstance(item.forecast, Forecast):
                    found[(item.subject, item.rule_key)] = item
            # The database serves every site: each site's people are told of its disk.
            if shared is not None and isinstance(shared.forecast, Forecast):
                found[("disk", (site_id,))] = shared
        return found

    return snap.cached("forecasts", make)  # type: ignore[no-any-return]


def minutes_to_limit(subject: str) -> Callable[[Snapshot], Values]:
    """Minutes from the evaluation to the crossing, for each `subject` with a forecast."""

    def compute(snap: Snapshot) -> Values:
        return {
            key: max(0.0, (item.forecast.crossing_at - snap.now) / 60)
            for (kind, key), item in forecasts(snap).items()
            if kind == subject and isinstance(item.forecast, Forecast)
        }

    return compute


def label_forecasts(created: Iterable[AlertInstance], snap: Snapshot) -> None:
    """Name the crossing each new forecast instance announces among its labels."""
    for inst in created:
        spec = inst.rule.signal_spec
        parts = inst.entity.split(":")
        if (
            spec is None
            or not spec.source.startswith(PREFIX)
            or not all(p.isdigit() for p in parts)
        ):
            continue
        key = tuple(int(p) for p in parts)
        item = forecasts(snap).get((spec.source.removeprefix(PREFIX), key))
        if item is None or not isinstance(item.forecast, Forecast):
            continue
        inst.labels = {
            **inst.labels,
            "crossing": utc_minute(item.forecast.crossing_at),
            "forecast": sentence(item) or "",
            "limit": f"{round(item.limit, 1):g} {item.unit}",
        }
