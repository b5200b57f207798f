"""The GPU page /gpus/<pk>/: its live figures against its own limits, Plotly history charts
(drawn by static/dashboard/gpu.js from /api/v1/history), the clock-event reasons over the
chosen range, and its ECC/XID events. Also serves plotly.js from the installed `plotly`
package: datacentres are air-gapped, so no CDN.

Every figure and level comes from `fleet.health` (through `fleet.read.state` readers and the
rack page's tile words); this module only puts them in order and in words.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.gpu_health import record_figures, xid_rows
from dashboard.rack import GpuTile, gpu_tile
from fleet import health
from fleet.access import can_view_site
from fleet.health.limits import LIMIT_LABELS, STORED_LIMITS, limit_in_force, reported_column
from fleet.models import GPU, Event
from fleet.read.forecast_now import forecasts_now
from fleet.read.forecast_sources import interval_words, sentence
from fleet.read.health_record import GpuRecord, gpu_record
from fleet.read.history import RANGES, HistoryError, reason_spans
from fleet.read.state import gpu_limits, latest_readings, throttle_words
from fleet.words import age_words, as_of, no_data_words

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
# Pages ask for it as ?v=<plotly version>, so an upgrade is a new URL: cache it for a year.
PLOTLY_MAX_AGE_S = 365 * 86400
PLOTLY_VERSION = plotly.__version__
PAGE_RANGES = ("1h", "24h", "7d")  # the range buttons; the API also takes 30d
EVENTS_SHOWN = 50
STALE = health.STALE_AFTER_S


@dataclass
class Figure:
    label: str
    value: str  # a number with its unit, or its age when stale, or "not reported"
    note: str = ""  # against what: a limit, a cap, a total


@dataclass
class LimitLine:
    name: str  # "slowdown", "shutdown", "max operating", "HBM max"
    value_c: float


@dataclass
class LimitRow:
    label: str  # "slowdown"
    value: str  # "87 °C"
    origin: str  # "inventory" or "reported by the agent" (fleet.health.limits.Origin)
    note: str = ""  # "the agent reports 90 °C" where the inventory's differs


@dataclass
class ReasonRow:
    start: str
    end: str
    duration: str
    reasons: list[str]
    throttling: bool


@dataclass
class EventRow:
    when: str
    age: str
    kind: str
    code: str
    detail: str
    gpu: str  # "GPU 3", or "node" for the host's own


@dataclass
class GpuPage:
    pk: int
    index: int
    model: str
    uuid: str
    node_id: int
    node_name: str
    rack_id: int
    rack_name: str
    hall: str
    site_id: int
    site_name: str
    level: str
    level_word: str
    reasons: list[str]
    throttling: bool
    stale: str | None
    lost: str | None  # "off the bus since 03:23 UTC (XID 79)"
    unjudged: str | None  # why a GPU with fresh data still has no level
    figures: list[Figure]
    limits: list[LimitLine]
    power_cap_w: float | None
    mem_total_mib: float | None
    range: str
    as_of: str
    origin: str = ""  # where its figures come from: its agent, or a Prometheus source
    limit_rows: list[LimitRow] = field(default_factory=list)  # each in force, with its origin
    timeline_tier: str = ""
    timeline: list[ReasonRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    health: GpuRecord | None = None  # its health record (docs/gpu-health.md)
    # Its temperature's time to limit in words, and the interval (docs/forecast.md).
    forecast: tuple[str, str] | None = None

    @property
    def health_figures(self) -> list[tuple[str, str]]:
        return [] if self.health is None else record_figures(self.health.facts)

    @property
    def health_xids(self) -> list[tuple[str, str, str, str]]:
        return [] if self.health is None else xid_rows(self.health.facts)

    def chart_config(self) -> dict[str, Any]:
        """What gpu.js needs to draw and extend the charts."""
        return {
            "gpu_id": self.pk,
            "rack_id": self.rack_id,
            "range": self.range,
            "limits": [{"name": lim.name, "value_c": lim.value_c} for lim in self.limits],
            "power_cap_w": self.power_cap_w,
            "mem_total_mib": self.mem_total_mib,
        }


def _clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _figure(
    reading: health.Reading, metric: str, now: float, unit: str, fmt: str = ".0f"
) -> str | None:
    """A fresh value with its unit; its age when it stopped; None when never reported."""
    if metric not in reading.values:
        return None
    value = reading.fresh(metric, now, STALE)
    if value is None:
        return no_data_words(reading.ts.get(metric), now)
    return f"{value:{fmt}} {unit}"


def _limit_note(headroom_c: float | None, limit_c: float | None, name: str) -> str | None:
    if headroom_c is None and limit_c is None:
        return None
    at = "" if limit_c is None else f"{limit_c:.0f} °C"
    if headroom_c is None:
        return f"{name} {at}"
    side = f"{headroom_c:.0f} °C below" if headroom_c >= 0 else f"{-headroom_c:.0f} °C above"
    return f"{name} {at}: {side}".replace("  ", " ")


def temperature_figures(
    reading: health.Reading, limits: health.GpuLimits | None, now: float
) -> list[Figure]:
    lim = limits or health.GpuLimits()
    head = health.gpu_headroom(reading, lim, now)
    notes = [
        _limit_note(head.slowdown_c, lim.slowdown_c, "slowdown"),
        _limit_note(head.shutdown_c, lim.shutdown_c, "shutdown"),
        _limit_note(head.gpu_max_c, lim.gpu_max_c, "max operating"),
    ]
    temp = _figure(reading, "temp_gpu_c", now, "°C") or "not reported"
    out = [Figure("GPU temperature", temp, " · ".join(n for n in notes if n) or "limits unknown")]
    hbm = _figure(reading, "temp_mem_c", now, "°C")
    if hbm is not None:
        note = _limit_note(head.mem_max_c, lim.mem_max_c, "HBM max") or "limit unknown"
        out.append(Figure("HBM temperature", hbm, note))
    return out


def power_cap_w(reading: health.Reading, limits: health.GpuLimits | None) -> float | None:
    """The enforced cap the GPU last reported, else its maximum from gpu_info."""
    cap = reading.values.get("power_limit_w")
    if cap is None and limits is not None:
        cap = limits.power_limit_max_w
    return None if cap is None else float(cap)


def power_figure(reading: health.Reading, limits: health.GpuLimits | None, now: float) -> Figure:
    watts = _figure(reading, "power_w", now, "W") or "not reported"
    cap = power_cap_w(reading, limits)
    frac = health.power_vs_cap(reading, limits, now)
    if cap is None:
        return Figure("Power", watts, "cap unknown")
    share = "" if frac is None else f" ({100 * frac:.0f} % of it)"
    return Figure("Power", watts, f"cap {cap:.0f} W{share}")


def memory_figure(reading: health.Reading, now: float) -> Figure | None:
    used = reading.fresh("mem_used_mib", now, STALE)
    total = reading.values.get("mem_total_mib")
    if used is None:
        value = _figure(reading, "mem_used_mib", now, "MiB")
        return None if value is None else Figure("Memory used", value)
    if not total:
        return Figure("Memory used", f"{used:,.0f} MiB", "total unknown")
    return Figure(
        "Memory used", f"{used:,.0f} MiB", f"of {total:,.0f} MiB ({100 * used / total:.0f} %)"
    )


def live_figures(
    reading: health.Reading, limits: health.GpuLimits | None, now: float
) -> list[Figure]:
    figures = temperature_figures(reading, limits, now)
    figures.append(power_figure(reading, limits, now))
    optional = [
        ("SM clock", "clock_sm_mhz", "MHz"),
        ("Memory clock", "clock_mem_mhz", "MHz"),
        ("GPU utilisation", "util_gpu_pct", "%"),
        ("Memory-controller utilisation", "util_mem_pct", "%"),
    ]
    for label, metric, unit in optional:
        figures.append(Figure(label, _figure(reading, metric, now, unit) or "not reported"))
    memory = memory_figure(reading, now)
    if memory is not None:
        figures.append(memory)
    pstate = reading.fresh("pstate", now, STALE)
    if pstate is not None:
        figures.append(Figure("Performance state", f"P{int(pstate)}"))
    fan = _figure(reading, "fan_pct", now, "%")
    if fan is not None:
        figures.append(Figure("Fan", fan))
    return figures


def limit_lines(limits: health.GpuLimits | None) -> list[LimitLine]:
    """The GPU's own absolute limits, drawn on its temperature chart."""
    if limits is None:
        return []
    named = (
        ("slowdown", limits.slowdown_c),
        ("shutdown", limits.shutdown_c),
        ("max operating", limits.gpu_max_c),
        ("HBM max", limits.mem_max_c),
    )
    return [LimitLine(name, float(v)) for name, v in named if v is not None]


def limit_rows(gpu: GPU) -> list[LimitRow]:
    """Each limit in force (`fleet.health.limits`) with where it came from; an entered
    limit the agent reports otherwise says what the agent reports."""
    rows = []
    for name in STORED_LIMITS:
        entered, reported = getattr(gpu, name), getattr(gpu, reported_column(name))
        limit = limit_in_force(entered, reported)
        if limit.value is None or limit.origin is None:
            continue
        label, unit = LIMIT_LABELS[name]
        note = ""
        if entered is not None and reported is not None and entered != reported:
            note = f"the agent reports {reported:g} {unit}"
        rows.append(LimitRow(label, f"{limit.value:g} {unit}", limit.origin.value, note))
    return rows


def timeline(gpu: GPU, range_name: str, now: float) -> tuple[str, list[ReasonRow]]:
    """The decoded clock-event reasons over the range, newest first."""
    try:
        tier, spans = reason_spans((gpu.node_id, gpu.index), now - RANGES[range_name], now, now=now)
    except HistoryError:
        return "", []
    rows = []
    for span in reversed(spans):
        throttle = health.throttle_state(span.mask)
        rows.append(
            ReasonRow(
                start=_clock(span.start),
                end=_clock(min(span.end, now)),
                duration=age_words(min(span.end, now) - span.start),
                reasons=throttle_words(throttle) or ["no reason: full clocks"],
                throttling=throttle.throttling,
            )
        )
    return tier, rows


def event_rows(node_id: int, gpu_index: int | None, now: float) -> list[EventRow]:
    """The newest events of one GPU, or of a whole node (its GPUs' and its own) when
    `gpu_index` is None; `gpu` says which GPU an event came from on the node page."""
    rows = Event.objects.filter(node_id=node_id).order_by("-ts")
    if gpu_index is not None:
        rows = rows.filter(gpu_index=gpu_index)
    return [
        EventRow(
            when=_clock(e.ts),
            age=age_words(max(0.0, now - e.ts)) + " ago",
            kind=e.kind,
            code="" if e.code is None else str(e.code),
            detail=e.detail,
            gpu="node" if e.gpu_index is None else f"GPU {e.gpu_index}",
        )
        for e in rows[:EVENTS_SHOWN]
    ]


def gpu_page(gpu: GPU, range_name: str, now: float, figures_only: bool = False) -> GpuPage:
    """The page for one GPU (its node, rack and hall already joined on `gpu`)."""
    node, rack = gpu.node, gpu.node.rack
    readings = latest_readings("gpu", [node.id])
    reading = readings.get((node.id, gpu.index), health.EMPTY)
    node_reading = latest_readings("node", [node.id]).get((node.id,), health.EMPTY)
    reporting = health.node_reports(node_reading, readings.values(), now)
    limits = gpu_limits([node.id]).get((node.id, gpu.index))
    tile = gpu_tile(gpu, reading, limits, now, node_reports=reporting, tz=rack.hall.site.timezone)
    page = GpuPage(
        pk=gpu.pk,
        index=gpu.index,
        model=gpu.model,
        uuid=gpu.uuid,
        node_id=node.id,
        node_name=node.name,
        rack_id=rack.id,
        rack_name=rack.name,
        hall=rack.hall.name,
        site_id=rack.hall.site_id,
        site_name=rack.hall.site.name,
        level=tile.level,
        level_word=tile.level_word,
        reasons=tile.reasons,
        throttling=tile.throttling,
        stale=tile.stale,
        lost=tile.lost,
        unjudged=unjudged_words(tile),
        figures=live_figures(reading, limits, now),
        limits=limit_lines(limits),
        power_cap_w=power_cap_w(reading, limits),
        mem_total_mib=_float(reading.values.get("mem_total_mib")),
        range=range_name,
        as_of=as_of(now),
        origin=figures_origin(gpu, now),
        limit_rows=limit_rows(gpu),
    )
    if not figures_only:
        page.timeline_tier, page.timeline = timeline(gpu, range_name, now)
        page.events = event_rows(gpu.node_id, gpu.index, now)
        page.health = gpu_record(gpu.pk, now)
        page.forecast = gpu_forecast(page.site_id, gpu.pk, now)
    return page


def gpu_forecast(site_id: int, gpu_id: int, now: float) -> tuple[str, str] | None:
    """This minute's forecast of the GPU reaching its slowdown limit less the critical
    headroom (fleet.read.forecast_now; the task computed it): its words and interval."""
    for item in forecasts_now(site_id, now):
        if item.subject == "gpu" and item.entity_id == gpu_id:
            words = sentence(item)
            return None if words is None else (words, interval_words(item) or "")
    return None


def figures_origin(gpu: GPU, now: float) -> str:
    """Where the figures come from. A node's agent wins (the Prometheus pull skips nodes
    whose agent reported within the freshness window), so: its agent when that reported
    lately, else the Prometheus source(s) that pulled this GPU, else its agent's last word."""
    from fleet.models import SourceToken
    from fleet.models.prometheus import PulledGPU

    token = SourceToken.objects.filter(source=gpu.node.source, revoked=False).first()
    last_seen = None if token is None else token.last_seen
    if last_seen is not None and now - float(last_seen) <= health.STALE_AFTER_S:
        return "from its node's agent (fleet-agent)"
    pulled = list(
        PulledGPU.objects.filter(gpu=gpu).select_related("source").order_by("-last_pulled")
    )
    if pulled:
        names = ", ".join(p.source.name for p in pulled)
        return f"via Prometheus ({names}: dcgm-exporter series); its node's agent is not reporting"
    if token is None:
        return "no agent enrolled for its node, and no Prometheus source pulls it"
    return "from its node's agent, which has gone quiet"


def unjudged_words(tile: GpuTile) -> str | None:
    """A GPU that reports but has no level lacks what its headroom is measured against."""
    if tile.level != health.Level.UNKNOWN.value or tile.stale:
        return None
    return "not judged: no slowdown limit (or temperature) to measure its headroom against"


def _float(value: float | int | None) -> float | None:
    return None if value is None else float(value)


def _visible_gpu(request: HttpRequest, gpu_id: int) -> GPU:
    gpu = GPU.objects.select_related("node__rack__hall__site").filter(pk=gpu_id).first()
    if gpu is None or not can_view_site(request.user, gpu.node.rack.hall.site_id):
        raise Http404("no such GPU")
    return gpu


@login_required
@require_GET
def gpu_view(request: HttpRequest, gpu_id: int) -> HttpResponse:
    """One GPU as of now. `?range=` picks the charts' and timeline's range (1 h default);
    `?part=figures` skips the timeline and events (gpu.js refetches only the figures)."""
    gpu = _visible_gpu(request, gpu_id)
    range_name = request.GET.get("range", "1h")
    if range_name not in PAGE_RANGES:
        range_name = "1h"
    figures_only = request.GET.get("part") == "figures"
    page = gpu_page(gpu, range_name, time.time(), figures_only)
    context = {
        "gpu": page,
        "ranges": PAGE_RANGES,
        "chart_config": page.chart_config(),
        "plotly_version": PLOTLY_VERSION,
    }
    return render(request, "dashboard/gpu.html", context)


@login_required
@require_GET
def plotly_js(request: HttpRequest) -> FileResponse:
    """plotly.js as bundled with the installed `plotly` package (no CDN in a datacentre)."""
    response = FileResponse(PLOTLY_JS.open("rb"), content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = f"private, max-age={PLOTLY_MAX_AGE_S}, immutable"
    return response
