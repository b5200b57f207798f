"""What a target answered last time: the `fleet-agent check` line and the log line.

Every failure of one device becomes a `TargetError` with a short machine word
(`timeout`, `unreachable`, `auth_failed`, `device_error`, `bad_data`,
`not_found`, `protocol_error`) and a human detail. Collectors catch it, record
it here and return an empty reading, so one dead PDU never stops the others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger("agents.facility")

FAILURE_KINDS = (
    "timeout",
    "unreachable",
    "auth_failed",
    "device_error",
    "bad_data",
    "not_found",
    "protocol_error",
    "internal_error",
)


class TargetError(Exception):
    """One target could not be read this time."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(slots=True)
class TargetStatus:
    """The last outcome of polling one target."""

    state: str = "never_polled"  # "ok", "degraded", or one of FAILURE_KINDS
    detail: str = ""
    last_ok_ts: float | None = None
    answered_by: str = ""  # which path/profile answered, e.g. "redfish:EnvironmentMetrics"
    readings: int = 0
    notes: list[str] = field(default_factory=list)  # faults the device itself reports

    def record_ok(self, now: float, readings: int, answered_by: str, notes: list[str]) -> None:
        self.state = "degraded" if notes else "ok"
        self.detail = "; ".join(notes)
        self.last_ok_ts = now
        self.readings = readings
        self.answered_by = answered_by
        self.notes = notes

    def record_failure(self, error: TargetError) -> None:
        self.state = error.kind
        self.detail = error.detail
        self.readings = 0
        self.notes = []


def log_transition(target: str, before: str, status: TargetStatus) -> None:
    """Log only when a target changes state, so a dead device does not flood the log."""
    if before == status.state:
        return
    level = logging.INFO if status.state in ("ok", "degraded") else logging.WARNING
    log.log(level, "facility target %s: %s -> %s %s", target, before, status.state, status.detail)
