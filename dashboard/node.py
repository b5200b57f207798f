"""The node page /nodes/<id>/: its GPUs (the rack page's tiles, each linking to its GPU
page), its host figures, its InfiniBand/RoCE ports (dashboard/fabric.py), the host tuning
audit, the agent's version and clock, and how old its data is. Figures and levels come from
`fleet.health` through `fleet.read.state`; this module puts them in order and in words.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.fabric import PortRow, port_rows
from dashboard.gpu import PLOTLY_VERSION, EventRow, event_rows
from dashboard.rack import GpuTile, gpu_tiles
from fleet import health
from fleet.access import can_view_site
from fleet.agent_versions import agent_line, node_agent_support
from fleet.models import GPU, Node, SourceToken
from fleet.read.state import gpu_limits, latest_readings
from fleet.words import age_words, as_of, clock_offset_text, level_word, no_data_words

STALE = health.STALE_AFTER_S
MIB_PER_GIB = 1024.0


@dataclass
class HostFigure:
    label: str
    value: str  # a number with its unit, its age when stale


@dataclass
class LinkedTile:
    pk: int
    tile: GpuTile


@dataclass
class NodePage:
    id: int
    name: str
    model: str
    position: int
    rack_id: int
    rack_name: str
    hall: str
    site_id: int
    site_name: str
    level: str
    level_word: str
    stale: str | None
    unjudged: str | None  # why a node with fresh data still has no level
    last_data: str
    gpus: list[LinkedTile]
    host: list[HostFigure]
    tuning: list[str] | None  # None: the agent has not reported an audit
    agent: str  # "Agent 0.1.0 · protocol v1"
    agent_outdated: str | None  # why the agent must be upgraded, in words; None: it need not
    clock_offset: str
    last_heard: str
    as_of: str
    events: list[EventRow]
    lost: str = ""  # "2 GPUs lost" while the node reports
    ports: list[PortRow] = field(default_factory=list)  # InfiniBand/RoCE, as last read


def _fresh(reading: health.Reading, metric: str, now: float) -> float | None:
    value = reading.fresh(metric, now, STALE)
    return None if value is None else float(value)


def _figure(reading: health.Reading, metric: str, now: float, unit: str, fmt: str) -> str | None:
    if metric not in reading.values:
        return None  # never reported: the row is left out
    value = _fresh(reading, metric, now)
    if value is None:
        return no_data_words(reading.ts.get(metric), now)
    return f"{value:{fmt}} {unit}"


def _memory(reading: health.Reading, now: float) -> str | None:
    used, total = _fresh(reading, "mem_used_mib", now), reading.values.get("mem_total_mib")
    if used is None:
        return _figure(reading, "mem_used_mib", now, "MiB", ",.0f")
    if not total:
        return f"{used / MIB_PER_GIB:,.1f} GiB used"
    return (
        f"{used / MIB_PER_GIB:,.1f} of {total / MIB_PER_GIB:,.1f} GiB ({100 * used / total:.0f} %)"
    )


def _rate(reading: health.Reading, metric: str, now: float) -> str | None:
    """Bytes per second as MB/s (decimal, as disks and links are rated)."""
    if metric not in reading.values:
        return None
    value = _fresh(reading, metric, now)
    if value is None:
        return no_data_words(reading.ts.get(metric), now)
    return f"{value / 1e6:,.1f} MB/s"


HOST_FIGURES: tuple[tuple[str, str, str, str], ...] = (
    ("CPU busy", "cpu_pct", "%", ".0f"),
    ("Load, 1-min average", "load1", "runnable tasks", ".2f"),
    ("Hottest CPU package", "temp_cpu_c", "°C", ".0f"),
    ("Inlet air", "temp_inlet_c", "°C", ".1f"),
    ("Outlet air", "temp_outlet_c", "°C", ".1f"),
    ("Input power (node meter)", "power_w", "W", ",.0f"),
)
RATES = (
    ("Disk read", "disk_read_bytes_s"),
    ("Disk write", "disk_write_bytes_s"),
    ("Network receive", "net_rx_bytes_s"),
    ("Network transmit", "net_tx_bytes_s"),
)


def host_figures(reading: health.Reading, now: float) -> list[HostFigure]:
    """The node's own readings it reports; one it never sent is left out."""
    out: list[HostFigure] = []
    for label, metric, unit, fmt in HOST_FIGURES:
        value = _figure(reading, metric, now, unit, fmt)
        if value is not None:
            out.append(HostFigure(label, value.rstrip()))
    memory = _memory(reading, now)
    if memory is not None:
        out.append(HostFigure("Memory", memory))
    for label, metric in RATES:
        value = _rate(reading, metric, now)
        if value is not None:
            out.append(HostFigure(label, value))
    return out


def tuning_findings(info: Any) -> list[str] | None:
    """The host tuning audit's findings (agents/collectors/tuning.py), None if never sent."""
    tuning = info.get("tuning") if isinstance(info, dict) else None
    if not isinstance(tuning, dict):
        return None
    found = tuning.get("findings", [])
    return [str(f) for f in found] if isinstance(found, list) else []


def last_data_words(ts: float | None, now: float) -> str:
    if ts is None:
        return "never"
    age = max(0.0, now - ts)
    return "just now" if age < 1 else f"{age_words(age)} ago"


def linked_tiles(
    node: Node,
    readings: dict[tuple[int, ...], health.Reading],
    limits: dict[tuple[int, int], health.GpuLimits],
    now: float,
    node_reports: bool,
    tz: str = "UTC",
) -> list[LinkedTile]:
    """The rack page's GPU tiles, each with the inventory id its link needs."""
    gpus = list(GPU.objects.filter(node=node).order_by("index"))
    tiles = gpu_tiles(
        [
            (g, readings.get((node.id, g.index), health.EMPTY), limits.get((node.id, g.index)))
            for g in gpus
        ],
        now,
        node_reports={node.id: node_reports},
        tz=tz,
    )
    return [LinkedTile(g.pk, tile) for g, tile in zip(gpus, tiles, strict=True)]


def node_page(node: Node, now: float) -> NodePage:
    """The page for one node (its rack, hall and site already joined on `node`)."""
    rack = node.rack
    reading = latest_readings("node", [node.id]).get((node.id,), health.EMPTY)
    gpu_readings = latest_readings("gpu", [node.id])
    limits = gpu_limits([node.id])
    summary = health.node_summary(
        [(r, limits.get((k[0], k[1]))) for k, r in sorted(gpu_readings.items())], reading, now
    )
    token = SourceToken.objects.filter(source=node.source).first()
    info = node.info if isinstance(node.info, dict) else {}
    support = node_agent_support(info)
    batch_seen = token is not None and token.last_seen is not None
    return NodePage(
        id=node.id,
        name=node.name,
        model=node.model,
        position=node.position,
        rack_id=rack.id,
        rack_name=rack.name,
        hall=rack.hall.name,
        site_id=rack.hall.site_id,
        site_name=rack.hall.site.name,
        level=summary.level.value,
        level_word=level_word(summary.level),
        stale=no_data_words(summary.ts, now) if summary.stale else None,
        unjudged=(
            "not judged: a GPU's headroom to its own slowdown limit is unknown"
            if summary.level == health.Level.UNKNOWN and not summary.stale
            else None
        ),
        last_data=last_data_words(summary.ts, now),
        gpus=linked_tiles(
            node, gpu_readings, limits, now, not summary.stale, rack.hall.site.timezone
        ),
        lost=health.gpus_lost_words(summary.lost_gpus) if summary.lost_gpus else "",
        host=host_figures(reading, now),
        tuning=tuning_findings(info),
        agent=agent_line(support, batch_seen),
        agent_outdated=support.flag(),
        clock_offset=clock_offset_text(None if token is None else token.agent_stats),
        last_heard=last_data_words(None if token is None else token.last_seen, now),
        as_of=as_of(now),
        events=event_rows(node.id, None, now),
        ports=port_rows(node.id, now),
    )


@login_required
@require_GET
def node_view(request: HttpRequest, node_id: int) -> HttpResponse:
    node = Node.objects.select_related("rack__hall__site").filter(pk=node_id).first()
    if node is None or not can_view_site(request.user, node.rack.hall.site_id):
        raise Http404("no such node")
    context = {"node": node_page(node, time.time()), "plotly_version": PLOTLY_VERSION}
    return render(request, "dashboard/node.html", context)
