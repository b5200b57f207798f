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

__all__ = (
    "SEVERITIES",
    "Kind",
    "Member",
    "MessageKind",
    "Notice",
    "Severity",
    "Where",
    "severity_rank",
)

# An alert group's messages (fleet/alerts/notify.py): its first members firing, new places
# joining it, a reminder while it fires unacknowledged, and the end of it.
MessageKind = Literal["firing", "update", "repeat", "resolved"]
Kind = Literal["firing", "update", "repeat", "resolved", "test"]
Severity = Literal["info", "warning", "critical"]

# Ordered least to most urgent: a route's minimum severity compares by rank.
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)  # type: ignore[arg-type]


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


@dataclass(frozen=True)
class Notice:
    """One message to send: an alert group firing, updated, repeated or resolved, or a
    route test."""

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
