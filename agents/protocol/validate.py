"""Fast validation of a decoded batch (a dict from `orjson.loads`).

Runs on the ingest hot path, so it uses exact `type()` tests and one pass per
sample instead of a JSON-Schema engine; `schema-v1.json` states the same rules
for people and other tools, and a test keeps the two in step. The checks of single fields,
with the words of each refusal, are in agents/protocol/validate_fields.py.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.protocol import (
    MAX_EVENTS_PER_BATCH,
    MAX_FUTURE_S,
    MAX_GPUS_PER_NODE,
    MAX_INFO_BYTES,
    MAX_INFO_DEPTH,
    MAX_PAST_S,
    PROTOCOL_VERSION,
    parse_source,
)
from agents.protocol.fabric import check_fabric
from agents.protocol.memory import MEMORY_ERRORS_KEY, memory_error_problem
from agents.protocol.metrics import ENTITY_KEYS, METRICS, SAMPLE_KINDS, SampleKind
from agents.protocol.validate_fields import (
    _BLANK_WINDOWS,
    _INT32_BLANK,
    _INT64_MAX,
    _SPECS,
    ProtocolError,
    _cadence,
    _event,
    _list_of_objects,
    _object,
    _sent_at,
    _slow_sample,
    _timestamp,
    is_dcgm_blank,
)
from agents.protocol.workloads import check_workloads

__all__ = ("TOP_LEVEL_KEYS", "Batch", "ProtocolError", "is_dcgm_blank", "validate_batch")


@dataclass(slots=True)
class Batch:
    source: str
    seq: int
    # kind -> the validated samples (dicts as sent; whole floats in integer fields made int)
    samples: dict[SampleKind, list[dict[str, Any]]] = field(default_factory=dict)
    gpu_info: list[dict[str, Any]] = field(default_factory=list)
    node_info: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    agent: dict[str, Any] | None = None
    # The source's declared cadence (seconds); None from an agent older than the field.
    sample_s: float | None = None
    batch_s: float | None = None
    fields_s: dict[str, float] = field(default_factory=dict)  # slower fields' own intervals
    workloads: list[dict[str, Any]] = field(default_factory=list)  # who runs on each GPU
    fabric: list[dict[str, Any]] = field(default_factory=list)  # InfiniBand/RoCE ports

    @property
    def gpu_samples(self) -> int:
        return len(self.samples.get("gpu", ()))


TOP_LEVEL_KEYS = frozenset(
    {
        "protocol",
        "source",
        "seq",
        "sent_at",
        "cadence",
        "gpu_info",
        "node_info",
        "events",
        "agent",
        "workloads",
        "fabric",
    }
    | set(SAMPLE_KINDS)
)


def validate_batch(obj: Any, now: float, typed: frozenset[str] = frozenset()) -> Batch:
    """Check a decoded batch and return it as rows; raise ProtocolError on the first fault.

    `typed`: sample kinds whose lists a typed decoder built (the server's, in
    fleet/ingest/fast_decode.py): every sample an object of known fields with its entity
    keys and `ts`, each value of its field's type and within its catalogue range. What
    is left to check of them here is what that decoder cannot know: the time window, which
    moves with `now`, and DCGM's blank sentinels inside a wide range."""
    if type(obj) is not dict:
        raise ProtocolError(400, "$", "a batch must be a JSON object")
    for key in obj:
        if key not in TOP_LEVEL_KEYS:
            raise ProtocolError(400, key, "unknown top-level field")
    protocol = obj.get("protocol")
    if type(protocol) is not int or protocol != PROTOCOL_VERSION:  # not True, not 1.0
        raise ProtocolError(400, "protocol", f"must be {PROTOCOL_VERSION} (an integer)")
    source = obj.get("source")
    if type(source) is not str:
        raise ProtocolError(400, "source", "required string 'kind:name'")
    try:
        parse_source(source)
    except ValueError as exc:
        raise ProtocolError(400, "source", str(exc)) from None
    seq = obj.get("seq")
    if type(seq) is not int or seq < 0:
        raise ProtocolError(400, "seq", "required non-negative integer")
    if seq > _INT64_MAX:  # the database's BIGINT: a larger seq could never be saved
        raise ProtocolError(400, "seq", f"must be at most {_INT64_MAX} (a 64-bit integer)")
    sent_at = obj.get("sent_at")
    if sent_at is not None:
        _sent_at(sent_at)
    batch = Batch(source=source, seq=seq)
    if "cadence" in obj:
        batch.sample_s, batch.batch_s, batch.fields_s = _cadence(obj["cadence"])
    # Every timestamp must lie in [oldest, newest]: one chained comparison per sample.
    oldest, newest = now - MAX_PAST_S, now + MAX_FUTURE_S
    for kind in SAMPLE_KINDS:
        samples = obj.get(kind)
        if samples is None:
            continue
        if type(samples) is not list:
            raise ProtocolError(400, kind, "must be a list of samples")
        if kind in typed and _typed_block_valid(kind, samples, oldest, newest):
            batch.samples[kind] = samples
        elif _one_shape_all_valid(kind, samples, oldest, newest):
            batch.samples[kind] = samples  # the agent's tick: checked as one block
        else:
            batch.samples[kind] = [
                _sample(kind, i, s, oldest, newest) for i, s in enumerate(samples)
            ]
        _check_unique(kind, batch.samples[kind])
    batch.gpu_info = _list_of_objects(obj, "gpu_info")
    events = _list_of_objects(obj, "events")
    if len(events) > MAX_EVENTS_PER_BATCH:
        raise ProtocolError(
            400, "events", f"{len(events)} events; at most {MAX_EVENTS_PER_BATCH} per batch"
        )
    batch.events = [_event(i, e, oldest, newest) for i, e in enumerate(events)]
    batch.node_info = _object(obj, "node_info")
    batch.agent = _object(obj, "agent")
    _check_info(batch)
    if "workloads" in obj:
        batch.workloads = check_workloads(
            obj["workloads"],
            source.partition(":")[0],
            lambda ts, where: _timestamp(ts, where, "workload", oldest, newest),
            lambda where, reason: ProtocolError(400, where, reason),
        )
    if "fabric" in obj:
        batch.fabric = check_fabric(
            obj["fabric"],
            source.partition(":")[0],
            lambda ts, where: _timestamp(ts, where, "port reading", oldest, newest),
            lambda where, reason: ProtocolError(400, where, reason),
        )
    return batch


@dataclass(frozen=True, slots=True)
class _Plan:
    """Bounds for one sample shape (its keys in order), checked in C by `map`."""

    lo: tuple[float, ...]
    hi: tuple[float, ...]
    ts_pos: int
    int_types: Callable[[tuple[type, ...]], Any]  # the types at integer-field positions
    big_pos: tuple[int, ...]  # fields whose range admits a DCGM blank value
    int_pos: tuple[int, ...] = ()  # integer fields


_NUMBERS = frozenset({int, float})
_PLANS: dict[tuple[str, tuple[str, ...]], _Plan | None] = {}
_FAST_KINDS = frozenset({"gpu", "node", "facility"})  # no string keys


def _plan(kind: str, keys: tuple[str, ...]) -> _Plan | None:
    """A fast-path plan for samples with exactly these keys, or None (use the slow path)."""
    specs = _SPECS[kind]
    if kind not in _FAST_KINDS or "ts" not in keys:
        return None
    lo: list[float] = []
    hi: list[float] = []
    ints: list[int] = []
    big: list[int] = []
    for pos, key in enumerate(keys):
        if key == "ts":
            lo.append(1_000_000_000)
            hi.append(math.inf)
        elif key == "gpu" and kind == "gpu":  # a node/facility sample has no `gpu` key
            lo.append(0)
            hi.append(1023)
            ints.append(pos)
        elif key in specs:
            low, high, integer = specs[key]
            lo.append(low)
            hi.append(high)
            if integer:
                ints.append(pos)
            if high >= _INT32_BLANK:
                big.append(pos)
        else:
            return None
    if any(key not in keys for key in ENTITY_KEYS[kind]):
        return None
    # itemgetter of a single position returns the item, not a 1-tuple: naming every
    # position twice makes it always return a tuple.
    getter = operator.itemgetter(*ints, *ints) if ints else (lambda t: ())
    return _Plan(tuple(lo), tuple(hi), keys.index("ts"), getter, tuple(big), tuple(ints))


def _cached_plan(kind: str, keys: tuple[str, ...]) -> _Plan | None:
    cache_key = (kind, keys)
    if cache_key in _PLANS:
        return _PLANS[cache_key]
    plan = _plan(kind, keys)
    if len(_PLANS) < 4096:  # agents send few shapes; bound it against a hostile one
        _PLANS[cache_key] = plan
    return plan


@functools.lru_cache(maxsize=256)
def _repeated(plan: _Plan, width: int, count: int) -> tuple[tuple[Any, ...], ...]:
    """The plan's bounds and masks laid end to end for `count` samples."""
    int_mask = tuple(pos in plan.int_pos for pos in range(width))
    big_mask = tuple(pos in plan.big_pos for pos in range(width))
    return plan.lo * count, plan.hi * count, int_mask * count, big_mask * count


def _one_shape_all_valid(kind: str, samples: list[Any], oldest: float, newest: float) -> bool:
    """True when every sample is an object with one cached shape and every value passes:
    the agent's usual tick (8 GPUs, same fields), checked in a few C-level passes over
    the whole list. False sends the list through `_sample`, which names any fault."""
    count = len(samples)
    if count < 2 or set(map(type, samples)) != {dict}:
        return False
    keys = tuple(samples[0])
    plan = _cached_plan(kind, keys)
    if plan is None or not all(map(keys.__eq__, map(tuple, samples))):
        return False
    width = len(keys)
    values = tuple(itertools.chain.from_iterable(map(dict.values, samples)))
    types = tuple(map(type, values))
    lo, hi, int_mask, big_mask = _repeated(plan, width, count)
    stamps = values[plan.ts_pos :: width]
    return (
        _NUMBERS.issuperset(types)
        and all(map(operator.le, lo, values))
        and all(map(operator.le, values, hi))
        and oldest <= min(stamps)
        and max(stamps) <= newest
        and float not in itertools.compress(types, int_mask)
        and not any(map(is_dcgm_blank, itertools.compress(values, big_mask)))
    )


# Per kind, the fields whose range admits one of DCGM's blank sentinels.
_BLANK_PRONE: dict[str, tuple[str, ...]] = {
    kind: tuple(m.name for m in metrics if m.hi >= _INT32_BLANK)
    for kind, metrics in METRICS.items()
}


def _typed_block_valid(kind: str, samples: list[Any], oldest: float, newest: float) -> bool:
    """The checks left for samples a typed decoder built (see `validate_batch`); False
    sends them through `_sample`, which names the fault."""
    if not samples:
        return True
    stamps = [s["ts"] for s in samples]
    if not (oldest <= min(stamps) and max(stamps) <= newest):
        return False
    prone = _BLANK_PRONE[kind]
    values = sorted([s[name] for s in samples for name in prone if name in s])
    # Sorted once, each sentinel window is one bisection (no call per value).
    for lo, hi in _BLANK_WINDOWS:
        at = bisect.bisect_left(values, lo)
        if at < len(values) and values[at] <= hi:
            return False
    return True


def _sample(kind: SampleKind, i: int, sample: Any, oldest: float, newest: float) -> dict[str, Any]:
    """Validate one sample. Agents send the same shape every tick, so the common
    case is one cached plan and three C-level passes over the values; anything
    unusual goes to `_slow_sample`, which finds and names the fault."""
    if type(sample) is dict:
        plan = _cached_plan(kind, tuple(sample))
        if plan is not None:
            values = tuple(sample.values())
            types = tuple(map(type, values))
            if (
                _NUMBERS.issuperset(types)
                and all(map(operator.le, plan.lo, values))
                and all(map(operator.le, values, plan.hi))
                and oldest <= values[plan.ts_pos] <= newest
                and float not in plan.int_types(types)
                and not any(is_dcgm_blank(values[p]) for p in plan.big_pos)
            ):
                return sample
    return _slow_sample(kind, i, sample, oldest, newest)


# A sample's identity: its entity keys and its time. Two alike in one batch would be
# stored once in raw storage and the other way round in latest state, so both are refused.
_IDENTITY: dict[str, Callable[[dict[str, Any]], Any]] = {
    kind: operator.itemgetter(*ENTITY_KEYS[kind], "ts") for kind in SAMPLE_KINDS
}


def _check_unique(kind: str, samples: list[dict[str, Any]]) -> None:
    """One C-level pass (a set of identities) in the usual case; names both on a clash."""
    if len(samples) < 2:
        return
    identify = _IDENTITY[kind]
    if len(set(map(identify, samples))) == len(samples):
        return
    first: dict[Any, int] = {}
    for i, identity in enumerate(map(identify, samples)):
        j = first.setdefault(identity, i)
        if j != i:
            keys = ENTITY_KEYS[kind]
            what = " ".join(
                f"{key.upper() if key == 'gpu' else key} {samples[i][key]}" for key in keys
            )
            entity = f"the same {what}" if what else f"the same {kind}"
            raise ProtocolError(
                400,
                f"{kind}[{i}]",
                f"{kind}[{j}] and {kind}[{i}]: {entity} at ts {samples[i]['ts']} twice "
                "in one batch (send one sample per entity and time)",
            )


def _check_info(batch: Batch) -> None:
    """gpu_info/node_info/agent are free-form, but stored: indices in range, no NUL
    characters (PostgreSQL text and jsonb refuse them, which would fail the commit), and
    within the limits on GPUs per node, size and depth."""
    if len(batch.gpu_info) > MAX_GPUS_PER_NODE:
        raise ProtocolError(
            400,
            "gpu_info",
            f"{len(batch.gpu_info)} GPUs; a node has at most {MAX_GPUS_PER_NODE}",
        )
    seen: dict[int, int] = {}
    for i, info in enumerate(batch.gpu_info):
        index = info.get("gpu")
        if type(index) is not int or not 0 <= index <= 1023:
            raise ProtocolError(400, f"gpu_info[{i}].gpu", "required GPU index 0..1023")
        j = seen.setdefault(index, i)
        if j != i:
            raise ProtocolError(
                400,
                f"gpu_info[{i}].gpu",
                f"gpu_info[{j}] and gpu_info[{i}] both describe GPU {index}",
            )
        if MEMORY_ERRORS_KEY in info:
            problem = memory_error_problem(info[MEMORY_ERRORS_KEY])
            if problem is not None:
                key, why = problem
                where = f"gpu_info[{i}].{MEMORY_ERRORS_KEY}" + (f".{key}" if key else "")
                raise ProtocolError(400, where, why)
    for name, value in (
        ("gpu_info", batch.gpu_info),
        ("node_info", batch.node_info),
        ("agent", batch.agent),
    ):
        if not value:
            continue
        try:
            text = json.dumps(value)
        except RecursionError:
            raise ProtocolError(400, name, f"nested deeper than {MAX_INFO_DEPTH} levels") from None
        if "\\u0000" in text:
            raise ProtocolError(400, name, "text must not contain NUL characters")
        if len(text) > MAX_INFO_BYTES:
            raise ProtocolError(400, name, f"{len(text)} bytes as JSON; at most {MAX_INFO_BYTES}")
        if _depth(value, MAX_INFO_DEPTH + 1) > MAX_INFO_DEPTH:
            raise ProtocolError(400, name, f"nested deeper than {MAX_INFO_DEPTH} levels")


def _depth(value: Any, stop: int) -> int:
    """Levels of objects and lists in `value` (a scalar is 0), counting no further than `stop`."""
    if stop <= 0:
        return 0
    if type(value) is dict:
        children: Any = value.values()
    elif type(value) is list:
        children = value
    else:
        return 0
    deepest = 0
    for child in children:
        if type(child) is dict or type(child) is list:
            deepest = max(deepest, _depth(child, stop - 1))
            if deepest >= stop - 1:
                break
    return deepest + 1
