"""Alert severities: their order, and the level each one shows as.

The one definition the Slack routes (a route's minimum severity), the incident lists
(worst first), the site strip and the overview's alert mode all use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from fleet.health.levels import Level

Severity = Literal["info", "warning", "critical"]

# Least to most urgent: a route's minimum severity, and "worst first", compare by rank.
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")

# The level an alert firing at each severity gives what it is about. An info alert is
# news, not a problem: it leaves a tile (and the site strip) OK.
SEVERITY_LEVELS: dict[str, Level] = {
    "info": Level.OK,
    "warning": Level.WARN,
    "critical": Level.CRIT,
}


def severity_rank(severity: str) -> int:
    """0 for info up to 2 for critical; an unknown severity is a ValueError."""
    return SEVERITIES.index(severity)  # type: ignore[arg-type]


def severity_level(severity: str) -> Level:
    """The level of an alert firing at `severity` (an unknown severity reads as OK)."""
    return SEVERITY_LEVELS.get(severity, Level.OK)


def worst_severity(severities: Iterable[str]) -> Severity:
    """The most urgent of `severities`; info when there are none."""
    return SEVERITIES[max((severity_rank(s) for s in severities), default=0)]
