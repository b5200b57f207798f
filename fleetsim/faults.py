"""Fault injection for the simulator: `KIND[:TARGET][@START][+DURATION][,key=value…]`.

Examples: `cdu-pump-fail:CDU-1@30s+10m`, `gpu-xid:gpu-a01-03/2@1m,code=79`,
`network-partition:gpu-a01-03@20+60`, `chiller-degraded@0+1h`, `gpu-reset:gpu-a01-03@4m`,
`ib-port-flap:gpu-a01-03/5@1m+5m,every=60`.
START and DURATION are seconds from the simulator's start, with an optional `s`, `m` or
`h`; no START means at once, no DURATION means until the simulator stops (`gpu-reset` is
one moment: no DURATION). docs/simulator.md has the full table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# kind -> what its target names
FAULT_TARGETS: dict[str, str] = {
    "cdu-pump-fail": "loop",
    "chiller-degraded": "loop or nothing (every loop)",
    "rack-overload": "rack",
    "gpu-xid": "node/gpu",
    "gpu-reset": "node/gpu or node",
    "ecc-dbe": "node/gpu",
    "agent-crash": "node",
    "network-partition": "node or rack",
    "node-offline": "node or rack",
    # InfiniBand ports (fleetsim/fabric.py): NODE is its first HCA, NODE/N its mlx5_N.
    "ib-port-flap": "node or node/hca",
    "ib-symbol-errors": "node or node/hca",
    "ib-port-down": "node or node/hca",
}

# Faults that are an act at one moment, not a condition that lasts.
ONE_SHOT = frozenset({"gpu-reset"})

_SPEC = re.compile(
    r"^(?P<kind>[a-z-]+)(?::(?P<target>[^@+,]+))?(?:@(?P<start>[0-9.]+[smh]?))?"
    r"(?:\+(?P<duration>[0-9.]+[smh]?))?(?P<params>(?:,[a-z_]+=[^,]+)*)$"
)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    target: str | None
    start_s: float
    duration_s: float | None
    params: dict[str, str] = field(default_factory=dict)

    def active(self, elapsed_s: float) -> bool:
        if elapsed_s < self.start_s:
            return False
        return self.duration_s is None or elapsed_s < self.start_s + self.duration_s

    def hits(self, name: str) -> bool:
        """Whether this fault targets `name` (a node, rack, loop, or `node/gpu`)."""
        return self.target is None or self.target == name

    def number(self, key: str, default: float) -> float:
        try:
            return float(self.params.get(key, default))
        except ValueError:
            raise FaultSpecError(
                f"{self.kind}: {key}={self.params[key]!r} is not a number"
            ) from None


def parse_duration(text: str) -> float:
    unit = _UNITS.get(text[-1])
    return float(text[:-1]) * unit if unit else float(text)


def parse_fault(spec: str) -> Fault:
    match = _SPEC.match(spec.strip())
    if match is None:
        raise FaultSpecError(
            f"cannot read fault {spec!r}: expected KIND[:TARGET][@START][+DURATION]"
        )
    kind = match["kind"]
    if kind not in FAULT_TARGETS:
        raise FaultSpecError(f"unknown fault {kind!r}; known: {', '.join(FAULT_TARGETS)}")
    target = match["target"]
    needs = FAULT_TARGETS[kind]
    if target is None and "nothing" not in needs:
        raise FaultSpecError(f"{kind} needs a target ({needs}), e.g. {kind}:NAME")
    if needs == "node/gpu" and target is not None and "/" not in target:
        raise FaultSpecError(f"{kind} targets one GPU: {kind}:NODE/INDEX")
    hca = target.rpartition("/")[2] if target is not None and "/" in target else None
    if needs == "node or node/hca" and hca is not None and not hca.isdigit():
        raise FaultSpecError(f"{kind} targets a node or one HCA by number: {kind}:NODE/0")
    if kind in ONE_SHOT and match["duration"]:
        raise FaultSpecError(f"{kind} happens at one moment: {kind}:TARGET@START, no +DURATION")
    params = dict(p.split("=", 1) for p in match["params"].split(",") if p)
    start = parse_duration(match["start"]) if match["start"] else 0.0
    duration = parse_duration(match["duration"]) if match["duration"] else None
    return Fault(kind, target, start, duration, params)


@dataclass(slots=True)
class FaultPlan:
    faults: list[Fault] = field(default_factory=list)

    def active(self, kind: str, name: str, elapsed_s: float) -> Fault | None:
        for fault in self.faults:
            if fault.kind == kind and fault.hits(name) and fault.active(elapsed_s):
                return fault
        return None

    def any_active(self, kind: str, elapsed_s: float) -> bool:
        return any(f.kind == kind and f.active(elapsed_s) for f in self.faults)

    def started(self, kind: str, name: str, elapsed_s: float, step_s: float) -> Fault | None:
        """A fault on `name` that began during the last step (for one-shot effects)."""
        for fault in self.faults:
            if (
                fault.kind == kind
                and fault.hits(name)
                and elapsed_s - step_s < fault.start_s <= elapsed_s
            ):
                return fault
        return None
