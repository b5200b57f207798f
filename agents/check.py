"""`fleet-agent check`: what each collector sees on this machine, like a doctor's report.

For each collector: whether it set up, the fields it reads here (and the catalogue fields
it cannot, which are left out of every sample), the GPU limits, the host tuning findings,
and whether the server is reachable with the stored token. A facility agent's targets are
each polled once and shown with what they answer (`agents.facility.targets.check_targets`),
and their `feeds` are looked up in the site's inventory (`agents.facility.inventory_check`).
Exit 0 when everything that is configured works, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from agents.collectors.base import Collector, NotPresent, Reading
from agents.enroll import EnrollError, read_token
from agents.protocol import fabric, reasons
from agents.protocol.metrics import metric_names
from agents.runconfig import AgentConfig, ConfigError, config_from_args
from agents.uplink import http_url


def check_command(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"fleet-agent: {exc}")
        return 2
    from agents.collectors.registry import PluginError
    from agents.runner import agent_collectors

    try:
        collectors = agent_collectors(config)
    except (ConfigError, PluginError) as exc:
        print(f"fleet-agent: {exc}")
        return 2
    lines, healthy = check_report(config, collectors)
    print("\n".join(lines))
    return 0 if healthy else 1


def check_report(config: AgentConfig, collectors: list[Collector]) -> tuple[list[str], bool]:
    lines = [f"fleet-agent check — source {config.resolved_source()}"]
    healthy = True
    for collector in collectors:
        lines.append("")
        if _is_facility_poller(collector):
            facility_lines, answered = _check_facility(collector)
            lines.extend(facility_lines)
            healthy = healthy and answered
            continue
        try:
            collector.setup()
        except NotPresent as exc:
            lines.append(f"[{collector.name}] not used here: {exc}")
            continue
        except Exception as exc:
            lines.append(f"[{collector.name}] NOT AVAILABLE: {type(exc).__name__}: {exc}")
            healthy = False
            continue
        try:
            first = collector.collect(time.time())
            time.sleep(0.2)  # rates (CPU %, throughput) need two reads
            reading = collector.collect(time.time())
            reading.gpu_info = first.gpu_info or reading.gpu_info
            reading.node_info = {**first.node_info, **reading.node_info}
            reading.events = first.events + reading.events
            slow = getattr(collector, "slow_reads", None)
            for read in slow() if slow else []:
                reading.merge(read.read(time.time()))
        except Exception as exc:
            lines.append(f"[{collector.name}] FAILED: {type(exc).__name__}: {exc}")
            healthy = False
            continue
        finally:
            collector.close()
        lines.extend(_describe(collector.name, reading))
    if config.is_site():
        lines.append("")
        inventory_lines, known = _check_inventory(config, collectors)
        lines.extend(inventory_lines)
        healthy = healthy and known
    lines.append("")
    connected, connectivity = _connectivity(config)
    lines.extend(connectivity)
    return lines, healthy and connected


def _is_facility_poller(collector: Collector) -> bool:
    from agents.facility.poller import FacilityPoller

    return isinstance(collector, FacilityPoller)


def _check_facility(poller: Any) -> tuple[list[str], bool]:
    """Poll every target once: a line each with its readings or its failure, then the site."""
    from agents.facility.targets import check_targets

    try:
        lines = check_targets([poller])
    finally:
        poller.close()
    failing = [t.target.name for t in poller.targets if t.status.state not in ("ok", "degraded")]
    summary = f"failing: {', '.join(failing)}" if failing else "all answer"
    head = f"[facility] {len(poller.targets)} target(s), {summary}"
    return [head, *(f"  {line}" for line in lines)], not failing


def _check_inventory(config: AgentConfig, collectors: list[Collector]) -> tuple[list[str], bool]:
    """Each target whose `feeds` the site's inventory lacks: `run` would refuse to start."""
    from agents.facility.inventory_check import (
        InventoryUnavailable,
        check_site_inventory,
        facility_targets,
    )

    if not config.server:
        return ["[inventory] not checked: no server configured"], True
    try:
        token = read_token(Path(config.token_file))
        unknown = check_site_inventory(config.server, token, collectors)
    except (EnrollError, InventoryUnavailable) as exc:
        return [f"[inventory] NOT CHECKED: {exc}"], False
    checked = len(facility_targets(collectors))
    if not unknown:
        return [f"[inventory] {checked} target(s): every rack, feed and loop is known"], True
    head = f"[inventory] {len(unknown)} of {checked} target(s) feed what the site does not have"
    return [head, *(f"  NOT IN INVENTORY {line}" for line in unknown)], False


def _describe(name: str, reading: Reading) -> list[str]:
    lines = [f"[{name}] ok"]
    for kind, samples in sorted(reading.samples.items()):
        merged: dict[tuple[Any, ...], dict[str, Any]] = {}
        for sample in samples:
            key = (sample.get("gpu"), sample.get("rack"), sample.get("loop"))
            merged.setdefault(key, {}).update(sample)
        for key, sample in merged.items():
            label = kind if key[0] is None else f"{kind} {key[0]}"
            fields = sorted(k for k in sample if k not in ("ts", "gpu", "rack", "loop", "feed"))
            missing = [m for m in metric_names(kind) if m not in sample]  # type: ignore[arg-type]
            lines.append(f"  {label}: reads {', '.join(fields) or 'nothing'}")
            if "clock_event_reasons" in sample:
                mask = int(sample["clock_event_reasons"])
                named = ", ".join(reasons.decode(mask)) or "none"
                lines.append(f"  {label}: clock-event reasons now {mask:#x} ({named})")
            if missing:
                lines.append(f"  {label}: not available here (left out): {', '.join(missing)}")
    for info in reading.gpu_info:
        lines.append(
            f"  gpu {info.get('gpu')}: {info.get('model', '?')} {info.get('uuid', '')} "
            f"MIG {'on' if info.get('mig_mode') else 'off'}"
        )
        lines.append(f"  gpu {info.get('gpu')} limits: {json.dumps(info.get('limits', {}))}")
    tuning = reading.node_info.get("tuning")
    if isinstance(tuning, dict):
        for finding in tuning.get("findings", []):
            lines.append(f"  tuning: {finding}")
    for event in reading.events:
        lines.append(f"  event: {event.get('kind')} {event.get('detail', '')}")
    for port in reading.fabric:
        label = f"port {port['device']}/{port['port']}"
        words = ", ".join(str(port[k]) for k in ("state", "rate", "link_layer") if k in port)
        lines.append(f"  {label}: {words or 'no state readable'}")
        unsupported = [c for c in fabric.COUNTERS if c not in port["counters"]]
        if unsupported:
            lines.append(f"  {label}: not available here (left out): {', '.join(unsupported)}")
    return lines


def _connectivity(config: AgentConfig) -> tuple[bool, list[str]]:
    if not config.server:
        return True, ["[server] not configured (set server / FLEET_AGENT_SERVER)"]
    try:
        token = read_token(Path(config.token_file))
    except EnrollError as exc:
        return False, [f"[server] {exc}"]
    request = urllib.request.Request(
        http_url(config.server, "/api/v1/ingest"),
        data=b"{}",
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        urllib.request.urlopen(request, timeout=5)
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            return False, [f"[server] {config.server} refuses the token: run `fleet-agent enroll`"]
        # 400 for the empty probe batch: reachable, and the token was accepted.
        return True, [
            f"[server] {config.server} reachable, token accepted (probe answered {exc.code})"
        ]
    except OSError as exc:
        return False, [f"[server] {config.server} unreachable: {exc}"]
    return True, [f"[server] {config.server} reachable"]
