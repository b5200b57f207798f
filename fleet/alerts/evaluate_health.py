"""The health-state signals (fleet/alerts/signals.py, `health_record:<state>`): 1 for each
GPU whose health record (fleet/health/record.py) is in that state, from the states the task
`fleet.health` stored for every site this minute (fleet/read/health_now.py: the rules' 10 s
evaluation only reads them). A GPU in another state, or healthy, has no value: the rule's
instance, if any, resolves (`absent_clears`), so a GPU that goes from *watch* to *replace*
ends one alert and starts the other. A new instance is labelled with the record's first
evidence (`evidence`), which its summary names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from fleet.models import Site
from fleet.read.health_now import HealthState, health_now

if TYPE_CHECKING:
    from fleet.alerts.evaluate_state import Snapshot, Values
    from fleet.alerts.models import AlertInstance

__all__ = ("PREFIX", "in_state", "label_health")

PREFIX = "health_record:"
_States = dict[tuple[int, int], HealthState]


def _states(snap: Snapshot) -> _States:
    """Every site's GPUs that are not healthy, read once per evaluation."""

    def make() -> _States:
        found: _States = {}
        for site_id in Site.objects.values_list("pk", flat=True):
            found.update(health_now(site_id, snap.now))
        return found

    return snap.cached("health_states", make)  # type: ignore[no-any-return]


def in_state(state: str) -> Callable[[Snapshot], Values]:
    """1 for each GPU whose record is in `state`."""

    def compute(snap: Snapshot) -> Values:
        return {key: 1.0 for key, held in _states(snap).items() if held.state == state}

    return compute


def label_health(created: Iterable[AlertInstance], snap: Snapshot) -> None:
    """Name the evidence each new health-state instance starts with among its labels."""
    for inst in created:
        spec = inst.rule.signal_spec
        if spec is None or not spec.source.startswith(PREFIX):
            continue
        parts = inst.entity.split(":")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            continue
        held = _states(snap).get((int(parts[0]), int(parts[1])))
        if held is not None:
            inst.labels = {**inst.labels, "evidence": held.evidence}
