"""Facility targets -> collectors, and what `fleet-agent check` prints about them.

Contract with the agent (`agents/cli.py`, `agents/runner.py`):

- `build_collectors(tables)` takes the parsed `[[facility.targets]]` TOML tables
  (a list of dicts; keys in docs/facility.md) and returns the collectors to run:
  one `FacilityPoller` that polls every target concurrently on its own cadence and
  adds the site sums (rack power from PDU feeds, PUE with its category). It raises
  `TargetConfigError` (a ValueError whose message names the target and the key) for
  a table that cannot work; the agent should refuse to start with that message.
  Secrets are read here, from `*_env` / `*_file`, and never appear in a repr or log.
- The batch source for these samples is `site:<site>`: a facility agent writes
  `facility`, `rack`, `feed` and `loop` samples of its site.
- A target that fails is never an exception to the runner: its state is kept
  (`TargetStatus`), the poller emits one `collector_error` event when a target
  starts failing (and a `note` when it answers again), and the others go on.
- `check_targets(collectors)` polls each target once and returns one human line
  per target plus the site lines (PUE and its category, rack power against budget).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from agents.collectors.base import Collector
from agents.facility.collector import TargetCollector
from agents.facility.config import Target, TargetConfigError, parse_target
from agents.facility.poller import FacilityPoller
from agents.facility.site import describe


def make_target_collector(target: Target) -> TargetCollector:
    """The protocol's collector for one parsed target (imports are lazy: pysnmp is heavy)."""
    try:
        if target.protocol == "redfish":
            from agents.facility.redfish_collector import RedfishCollector

            return RedfishCollector(target)
        if target.protocol == "snmp":
            from agents.facility.snmp_collector import SnmpCollector

            return SnmpCollector(target)
        from agents.facility.modbus_collector import ModbusCollector

        return ModbusCollector(target)
    except TargetConfigError:
        raise
    except ValueError as exc:  # unknown profile, bad protocol option
        raise TargetConfigError(f"facility target {target.name!r}: {exc}") from None


def build_collectors(
    targets: list[dict[str, Any]], environ: dict[str, str] | None = None
) -> list[Collector]:
    """The collectors for `[[facility.targets]]`: one poller over all of them, or none."""
    parsed = [parse_target(table, environ) for table in targets]
    names = [t.name for t in parsed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise TargetConfigError(f"facility target names must be unique: {', '.join(duplicates)}")
    if not parsed:
        return []
    return [FacilityPoller([make_target_collector(t) for t in parsed])]


def check_targets(collectors: Sequence[Collector]) -> list[str]:
    """Poll every facility target once; one line per target, then the site sums."""
    lines: list[str] = []
    for poller in collectors:
        if not isinstance(poller, FacilityPoller):
            continue
        poller.collect(time.time())
        lines += [target_line(t) for t in poller.targets]
        lines += describe(poller.site)
    return lines


def target_line(collector: TargetCollector) -> str:
    target, status = collector.target, collector.status
    head = (
        f"{status.state.upper():<14} {target.name} ({target.protocol} {target.address}, "
        f"{target.profile}) -> {target.feeds}"
    )
    if status.state in ("ok", "degraded"):
        values = collector.latest.values if collector.latest else {}
        shown = " ".join(f"{k}={v:g}" for k, v in values.items()) or "no readings"
        head += f": {shown} [{status.answered_by}]"
        if status.detail:
            head += f"; {status.detail}"
        return head
    return f"{head}: {status.detail}"
