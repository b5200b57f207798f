"""The fabric signals (fleet/alerts/signals.py, `fabric:<what>`): each node's InfiniBand/RoCE
ports judged by fleet/health/fabric.py, the worst port's figure per node.

Set-based: one query reads every port's row (`fleet_fabricport`: its state, `rises`,
`last_active` and rate base, which the ingest writer keeps) once per evaluation, and one
query the `link_flap` events of the window; nothing is read per node or per port.
A node whose ports were all read longer ago than PORT_STALE_S (or that has none) has no
value. A new instance is labelled `port` ("mlx5_3 port 1"), the port it was about, which
summaries name; it is fixed when the instance starts, as its place is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from django.db import connection

from fleet.alerts.evaluate_nvlink import NVLINK_DERIVED
from fleet.health import fabric as judge
from fleet.models import Event
from fleet.storage.fabric import LINK_FLAP

if TYPE_CHECKING:
    from fleet.alerts.evaluate_state import Params, Snapshot, Values
    from fleet.alerts.models import AlertInstance

__all__ = ("FABRIC_DERIVED", "FABRIC_PARAMETRIC", "PREFIX", "label_ports")

PREFIX = "fabric:"
Worst = dict[int, str]  # node id -> the port a value is about


@dataclass(frozen=True, slots=True)
class PortRow:
    node_id: int
    device: str
    port: int
    ts: float
    state: str
    rises: dict[str, int]
    last_active: float | None
    base: judge.Checkpoint | None

    @property
    def name(self) -> str:
        return judge.port_name(self.device, self.port)


# JSON read as text and decoded with orjson on either engine (Django's JSONField decoding
# was most of the pass: 10,000 ports read in ~380 ms, now ~60 ms).
_PORTS_SQL = (
    "SELECT node_id, device, port, ts, state, CAST(rises AS TEXT), last_active,"
    " CAST(rate_base AS TEXT) FROM fleet_fabricport WHERE ts > %s"
)


def _fresh_ports(snap: Snapshot) -> list[PortRow]:
    """Every port read within PORT_STALE_S of the evaluation, in one query."""

    def make() -> list[PortRow]:
        with connection.cursor() as cur:
            cur.execute(_PORTS_SQL, [snap.now - judge.PORT_STALE_S])
            rows = cur.fetchall()
        return [
            PortRow(
                node_id,
                device,
                port,
                float(ts),
                state,
                orjson.loads(rises) if rises else {},
                last_active,
                _checkpoint(base),
            )
            for node_id, device, port, ts, state, rises, last_active, base in rows
        ]

    return snap.cached("fabric_ports", make)  # type: ignore[no-any-return]


def _checkpoint(text: str | None) -> judge.Checkpoint | None:
    if not text:
        return None
    value = orjson.loads(text)
    if isinstance(value, dict) and isinstance(value.get("rises"), dict) and "ts" in value:
        return judge.Checkpoint(float(value["ts"]), value["rises"])
    return None


Figure = tuple[int, "PortRow | str", float | None]  # node id, the port (or its name), value


def _worst(snap: Snapshot, tag: str, figures: Iterable[Figure]) -> Values:
    """Per node, the largest figure of its ports (None when none has one), and the port it
    belongs to kept for the labels (`tag` names the computation)."""
    out: Values = {}
    worst: Worst = {}
    for node_id, port, value in figures:
        key = (node_id,)
        if key not in out:
            out[key] = value
        elif value is None or ((best := out[key]) is not None and value <= best):
            continue
        else:
            out[key] = value
        if value is not None:
            worst[node_id] = port if isinstance(port, str) else port.name
    snap.cached(f"fabric_worst:{tag}", lambda: worst)
    return out


def ports_down(snap: Snapshot) -> Values:
    """Ports that were ACTIVE at some read and are not now (fleet.health.fabric)."""
    counts: Values = {}
    worst: Worst = {}
    for p in _fresh_ports(snap):
        down = judge.down_after_up(p.state, p.last_active)
        counts[(p.node_id,)] = (counts.get((p.node_id,)) or 0.0) + float(down)
        if down:
            worst.setdefault(p.node_id, p.name)
    snap.cached("fabric_worst:down", lambda: worst)
    return counts


def rate(counter: str) -> Callable[[Snapshot], Values]:
    """The fastest-rising port's `counter`, per hour, over its rate window."""

    def compute(snap: Snapshot) -> Values:
        return _worst(
            snap,
            f"rate:{counter}",
            (
                (p.node_id, p, judge.rate_per_hour(p.base, p.ts, p.rises, counter))
                for p in _fresh_ports(snap)
            ),
        )

    return compute


def flaps(snap: Snapshot, params: Params) -> Values:
    """Link flaps (the `link_downed` rises of the `link_flap` events) in (now - window_s,
    now] of the port that flapped most; 0 for a node whose ports are read and did not flap,
    so an instance resolves once its flaps leave the window."""
    window = float(params["window_s"])
    rows = Event.objects.filter(
        kind=LINK_FLAP, ts__gt=snap.now - window, ts__lte=snap.now, node__isnull=False
    ).values_list("node_id", "detail", "code")
    per_port: dict[tuple[int, str], float] = {}
    for node_id, detail, n in rows:
        port = event_port(detail)
        per_port[(node_id, port)] = per_port.get((node_id, port), 0.0) + float(n or 0)
    figures: list[Figure] = [(p.node_id, p, 0.0) for p in _fresh_ports(snap)]
    figures += [(node_id, port, n) for (node_id, port), n in per_port.items()]
    return _worst(snap, f"flaps:{window:g}", figures)


# The fabric signals the engine computes (fleet/alerts/evaluate_state.py), by (scope, name);
# NVLink's among them.
FABRIC_DERIVED: dict[tuple[str, str], Callable[[Snapshot], Values]] = {
    **NVLINK_DERIVED,
    ("node", "fabric_ports_down"): ports_down,
    **{("node", limit.signal): rate(limit.counter) for limit in judge.RATE_LIMITS},
}
FABRIC_PARAMETRIC: dict[tuple[str, str], Callable[[Snapshot, Params], Values]] = {
    ("node", "fabric_port_flaps"): flaps,
}


def event_port(detail: str) -> str:
    """The port a `link_flap` event's detail names ("mlx5_0 port 1: link_downed 3 → 5")."""
    return detail.partition(":")[0]


def label_ports(created: Iterable[AlertInstance], snap: Snapshot) -> None:
    """Name the port each new fabric instance is about among its labels."""
    for inst in created:
        spec = inst.rule.signal_spec
        if spec is None or not spec.source.startswith(PREFIX) or not inst.entity.isdigit():
            continue
        worst: Worst = snap.cached(f"fabric_worst:{_tag(spec.source, inst.rule.params)}", dict)
        port = worst.get(int(inst.entity))
        if port:
            inst.labels = {**inst.labels, "port": port}


def _tag(source: str, params: dict[str, Any] | None) -> str:
    """The `_worst` tag of a signal's computation, from its source and the rule's params."""
    what = source.removeprefix(PREFIX)
    if what == "flaps":
        window = float((params or {}).get("window_s", judge.FLAP_WINDOW_S))
        return f"flaps:{window:g}"
    return what
