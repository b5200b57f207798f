"""What a notification says, as plain typed data: the rules engine
(fleet/alerts/notify.py) fills a `Notice`; `fleet.notifications.slack` turns it into a
Slack message.

Nothing here touches Django or the network, so the message builder is a pure
function of a `Notice` and is unit-tested as one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

# The order of severities has one owner (fleet/health/severity.py); routes compare by it.
from fleet.health.severity import SEVERITIES, Severity, severity_rank

__all__ = (
    "SEVERITIES",
    "Kind",
    "Member",
    "MessageKind",
    "Notice",
    "Severity",
    "Where",
    "duration_words",
    "severity_rank",
)

# An alert group's messages (fleet/alerts/notify.py): its first members firing, new places
# joining it, a reminder while it fires unacknowledged, its cause recovered while what it
# caused is still open, and the end of it.
MessageKind = Literal["firing", "update", "repeat", "recovered", "resolved"]
# ... and the weekly report (fleet/notifications/weekly.py), and a route's test message.
Kind = Literal["firing", "update", "repeat", "recovered", "resolved", "report", "test"]


def duration_words(duration: timedelta) -> str:
    """To the second, as an incident's own length is told: '45 s', '3 min 2 s',
    '1 h 12 min' (seconds dropped past an hour)."""
    seconds = max(0, round(duration.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


@dataclass(frozen=True)
class Where:
    """The place an alert is about, as an operator names it; unknown levels stay None."""

    site: str | None = None
    hall: str | None = None
    rack: str | None = None
    node: str | None = None
    gpu: str | None = None
    feed: str | None = None  # a rack's power feed
    loop: str | None = None  # a cooling loop (site-level)

    def label(self) -> str:
        parts = (
            ("site", self.site),
            ("hall", self.hall),
            ("loop", self.loop),
            ("rack", self.rack),
            ("feed", self.feed),
            ("node", self.node),
            ("GPU", self.gpu),
        )
        named = [f"{name} {value}" for name, value in parts if value]
        return " / ".join(named) or "the whole fleet"


@dataclass(frozen=True)
class Member:
    """One instance in a grouped notice (e.g. one GPU of the eight running hot)."""

    where: Where
    value: float | None = None
    since: datetime | None = None
    cause: str = ""
    unit: str = ""  # the value's unit ("°C", "L/min"), said after it


@dataclass(frozen=True)
class Notice:
    """One message to send: an alert group firing, updated, repeated, its cause recovered
    or resolved, or a route test."""

    kind: Kind
    severity: Severity
    title: str
    where: Where = field(default_factory=Where)
    site_id: int | None = None  # for routing; None: fleet-wide
    since: datetime | None = None
    value: float | None = None
    threshold: float | None = None
    unit: str = ""
    cause: str = ""
    runbook_url: str = ""
    dashboard_url: str = ""
    duration: timedelta | None = None  # how long it fired (resolved notices)
    members: tuple[Member, ...] = ()
    thread: str = ""  # messages of one thread are delivered in order (an alert group)
    summary: str = ""  # a resolved incident's: how long, GPUs affected, GPU-hours lost
    # The team (namespace or Slurm account) holding every GPU it is about; '' when none or
    # several: routes with an `owner` filter get only notices of their owner.
    owner: str = ""
