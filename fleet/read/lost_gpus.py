"""Since when and why a lost GPU is lost (`fleet.health.lost` says *whether*): the newest
`gpu_lost` or XID 79 event of that GPU not older than its last sample, read in bulk for the
few GPUs a page shows as lost. Without such an event it has been missing from its node
since its last sample.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Q

from fleet import health
from fleet.models import Event

GpuKey = tuple[int, int]  # (node id, GPU index)


@dataclass(frozen=True, slots=True)
class LostSince:
    since: float | None  # epoch s: the event, else the GPU's last sample (None: never sent)
    xid: int | None  # OFF_THE_BUS_XID when its node reported that XID
    reported: bool  # its node said it was gone (an XID 79 or gpu_lost event)

    def words(self, tz: str = "UTC") -> str:
        """ "off the bus since 03:23 (XID 79)", in the site's time zone."""
        return health.lost_since_words(clock_words(self.since, tz), self.xid, self.reported)


def clock_words(ts: float | None, tz: str = "UTC") -> str:
    """HH:MM and the zone's abbreviation, as the pages say a moment ("03:23 UTC")."""
    if ts is None:
        return "before its first sample"
    try:
        zone: dt.tzinfo = zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        zone = dt.UTC
    return dt.datetime.fromtimestamp(ts, zone).strftime("%H:%M %Z")


def lost_since(gpus: Iterable[tuple[GpuKey, float | None]]) -> dict[GpuKey, LostSince]:
    """For each lost GPU (its key and its last sample's time): since when and why."""
    last = dict(gpus)
    if not last:
        return {}
    lost_kinds = Q(kind="gpu_lost") | Q(kind="xid", code=health.OFF_THE_BUS_XID)
    at = Q()
    for (node_id, index), ts in last.items():
        at |= Q(node_id=node_id, gpu_index=index, ts__gte=ts if ts is not None else 0.0)
    found: dict[GpuKey, list[tuple[float, str]]] = {}
    rows = Event.objects.filter(lost_kinds & at).values_list("node_id", "gpu_index", "ts", "kind")
    for event_node, event_gpu, when, kind in rows:
        if event_node is not None and event_gpu is not None:
            found.setdefault((event_node, event_gpu), []).append((when, kind))
    out: dict[GpuKey, LostSince] = {}
    for key, ts in last.items():
        events = found.get(key)
        if not events:
            out[key] = LostSince(ts, None, False)
            continue
        newest = max(t for t, _ in events)
        # The driver's XID 79 and the agent's gpu_lost come together: name the XID.
        xid = health.OFF_THE_BUS_XID if any(k == "xid" for _, k in events) else None
        out[key] = LostSince(newest, xid, True)
    return out
