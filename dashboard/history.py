"""GET /api/v1/history: one entity's metrics over a range, for every chart (fleet/read/history.py).

Query parameters:
- `kind`: gpu, node, rack, feed, loop or facility;
- the entity's key by its column names (`node_id` and `gpu` for a GPU, `rack_id`, …), or
  for a GPU its inventory id `gpu_id`;
- `metric`, repeated: catalogue names (agents/protocol/metrics.py);
- `start` and `end` in epoch seconds (`end` defaults to now), or `range=1h|24h|7d|30d`;
- `max_points` (default 600), `reasons=1` (GPUs: the clock-event reasons as spans).

Answers JSON: 400 `{"error": "<field>: <reason>", "field", "reason"}` for bad input,
401 when not signed in (an API caller wants JSON, not the login page), 404 for an entity
that does not exist or that the user may not see.
"""

from __future__ import annotations

import math
import time
from typing import Any

from django.http import HttpRequest, JsonResponse, QueryDict
from django.views.decorators.http import require_GET

from fleet import health
from fleet.access import can_view_site
from fleet.models import GPU
from fleet.read.history import (
    DEFAULT_MAX_POINTS,
    RANGES,
    HistoryError,
    ReasonSpan,
    entity_site_id,
    history,
    reason_spans,
)
from fleet.read.state import throttle_words
from fleet.storage.schema import ENTITY_COLUMNS


def _int(params: QueryDict, name: str) -> int:
    value = params.get(name)
    if value is None:
        raise HistoryError(name, "missing")
    try:
        return int(value)
    except ValueError:
        raise HistoryError(name, f"not an integer: {value!r}") from None


def _seconds(params: QueryDict, name: str, default: float) -> float:
    value = params.get(name)
    if value is None or value == "":
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise HistoryError(name, f"not epoch seconds: {value!r}") from None
    if not math.isfinite(seconds):
        raise HistoryError(name, "not a finite number")
    return seconds


def entity_key(params: QueryDict, kind: str) -> tuple[int, ...] | None:
    """The entity's stored key; None for a `gpu_id` the inventory does not hold."""
    if kind == "gpu" and "gpu_id" in params:
        gpu = GPU.objects.filter(pk=_int(params, "gpu_id")).values_list("node_id", "index")
        found = gpu.first()
        return None if found is None else (found[0], found[1])
    return tuple(_int(params, column) for column in ENTITY_COLUMNS[kind])


def time_range(params: QueryDict, now: float) -> tuple[float, float]:
    named = params.get("range")
    if named is not None:
        if named not in RANGES:
            raise HistoryError("range", f"one of {', '.join(RANGES)}")
        return now - RANGES[named], now
    if "start" not in params:
        raise HistoryError("start", "give start (and end) in epoch seconds, or range")
    return _seconds(params, "start", 0.0), _seconds(params, "end", now)


def span_json(span: ReasonSpan) -> dict[str, Any]:
    throttle = health.throttle_state(span.mask)
    return {
        "start": span.start,
        "end": span.end,
        "mask": span.mask,
        "reasons": throttle_words(throttle),
        "throttling": throttle.throttling,
        "level": throttle.level.value,
    }


def _refused(exc: HistoryError) -> JsonResponse:
    return JsonResponse({"error": str(exc), "field": exc.field, "reason": exc.reason}, status=400)


@require_GET
def history_api(request: HttpRequest) -> JsonResponse:
    if not request.user.is_authenticated:
        return JsonResponse({"error": "sign in first"}, status=401)
    params, now = request.GET, time.time()
    try:
        kind = params.get("kind", "")
        if kind not in ENTITY_COLUMNS:
            raise HistoryError("kind", f"one of {', '.join(ENTITY_COLUMNS)}")
        key = entity_key(params, kind)
        site_id = None if key is None else entity_site_id(kind, key)
        if key is None or site_id is None or not can_view_site(request.user, site_id):
            return JsonResponse({"error": f"no such {kind}"}, status=404)
        start, end = time_range(params, now)
        max_points = _int(params, "max_points") if "max_points" in params else DEFAULT_MAX_POINTS
        found = history(kind, key, params.getlist("metric"), start, end, max_points, now=now)
        body = found.as_json()
        if kind == "gpu" and params.get("reasons") == "1":
            tier, spans = reason_spans(key, start, end, max_points, now=now)
            body["reasons"] = {"tier": tier, "spans": [span_json(s) for s in spans]}
    except HistoryError as exc:
        return _refused(exc)
    return JsonResponse(body)
