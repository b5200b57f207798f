"""The field checks of a batch's validation (agents/protocol/validate.py): each names the
field it refuses and says why, in the words the server answers with (`ProtocolError`).
Split from validate.py, which keeps the batch's walk and the fast paths."""

from __future__ import annotations

import math
from typing import Any

from agents.protocol import (
    CADENCE_FIELDS_KEY,
    CADENCE_KEYS,
    MAX_FUTURE_S,
    MAX_INTERVAL_S,
    MAX_PAST_S,
    MIN_INTERVAL_S,
)
from agents.protocol.memory import RESET_EVENTS
from agents.protocol.metrics import ENTITY_KEYS, METRICS, SampleKind

_NUM = (int, float)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# name -> (lo, hi, integer) per kind, built once.
_SPECS: dict[str, dict[str, tuple[float, float, bool]]] = {
    kind: {m.name: (m.lo, m.hi, m.integer) for m in metrics} for kind, metrics in METRICS.items()
}

# DCGM's "blank" values (dcgm_structs.h): BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED.
_INT32_BLANK = 0x7FFFFFF0
_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
_FP64_BLANK = 140737488355328.0


_BLANK_WINDOWS = (
    (_INT32_BLANK, _INT32_BLANK + 3),
    (_INT64_BLANK, _INT64_BLANK + 15),
    (_FP64_BLANK, _FP64_BLANK + 3),
)


def is_dcgm_blank(value: float) -> bool:
    return (
        _INT32_BLANK <= value <= _INT32_BLANK + 3
        or _INT64_BLANK <= value <= _INT64_BLANK + 15
        or _FP64_BLANK <= value <= _FP64_BLANK + 3
    )


class ProtocolError(Exception):
    """A batch the server refuses. `code` mirrors HTTP (400, 403, 413)."""

    def __init__(self, code: int, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.code = code
        self.field = field
        self.reason = reason

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "field": self.field, "reason": self.reason}


_EVENT_KINDS = frozenset(
    {"xid", "ecc_sbe", "ecc_dbe", "gpu_lost", *RESET_EVENTS, "collector_error", "note"}
)


def _sent_at(value: Any) -> None:
    t = type(value)
    if t is int:
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ProtocolError(400, "sent_at", "must be a Unix time in seconds")
    elif t is not float or not math.isfinite(value):
        raise ProtocolError(400, "sent_at", "must be a number (Unix time in seconds)")


_ALL_METRICS = frozenset(m.name for metrics in METRICS.values() for m in metrics)


def _cadence(value: Any) -> tuple[float, float, dict[str, float]]:
    """The declared (sample_s, batch_s, fields_s): both intervals present, numbers within
    the bounds, a batch no more often than a sample (a batch carries at least one sampling
    interval), and each slower field a catalogue metric no faster than a sample."""
    if type(value) is not dict:
        raise ProtocolError(400, "cadence", "must be an object {sample_s, batch_s}")
    for key in value:
        if key not in CADENCE_KEYS and key != CADENCE_FIELDS_KEY:
            raise ProtocolError(400, f"cadence.{key}", "unknown cadence field")
    sample_s, batch_s = (_interval(value.get(key), f"cadence.{key}") for key in CADENCE_KEYS)
    if batch_s < sample_s:
        raise ProtocolError(
            400,
            "cadence.batch_s",
            f"{batch_s:g} s is shorter than sample_s {sample_s:g} s: a batch carries at least"
            " one sampling interval",
        )
    fields = value.get(CADENCE_FIELDS_KEY)
    if fields is None:
        if CADENCE_FIELDS_KEY in value:
            raise ProtocolError(400, "cadence.fields_s", "null: leave it out instead")
        return sample_s, batch_s, {}
    if type(fields) is not dict:
        raise ProtocolError(400, "cadence.fields_s", "must be an object {metric: seconds}")
    fields_s: dict[str, float] = {}
    for name, interval in fields.items():
        where = f"cadence.fields_s.{name}"
        if name not in _ALL_METRICS:
            raise ProtocolError(400, where, "unknown metric")
        fields_s[name] = _interval(interval, where)
        if fields_s[name] < sample_s:
            raise ProtocolError(
                400, where, f"{interval:g} s is shorter than sample_s {sample_s:g} s"
            )
    return sample_s, batch_s, fields_s


def _interval(interval: Any, where: str) -> float:
    if interval is None:
        raise ProtocolError(400, where, "required number of seconds (null is refused)")
    if type(interval) is not int and type(interval) is not float:
        raise ProtocolError(
            400, where, f"must be a number of seconds, got {type(interval).__name__}"
        )
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:  # also false for NaN
        raise ProtocolError(
            400, where, f"{interval} is outside [{MIN_INTERVAL_S:g}, {MAX_INTERVAL_S:g}] s"
        )
    return float(interval)


def _slow_sample(
    kind: SampleKind, i: int, sample: Any, oldest: float, newest: float
) -> dict[str, Any]:
    if type(sample) is not dict:
        raise ProtocolError(400, f"{kind}[{i}]", "a sample must be an object")
    _timestamp(sample.get("ts"), f"{kind}[{i}].ts", "sample", oldest, newest)
    keys = ENTITY_KEYS[kind]
    for key in keys:
        _entity_key(kind, key, sample.get(key), f"{kind}[{i}].{key}")
    specs = _SPECS[kind]
    for name, value in sample.items():
        spec = specs.get(name)
        if spec is not None:
            if _check_value(value, spec, f"{kind}[{i}].{name}"):
                sample[name] = int(value)  # 4.0 for an integer field: store it as 4
        elif name != "ts" and name not in keys:
            raise ProtocolError(400, f"{kind}[{i}].{name}", f"unknown {kind} metric")
    sample["ts"] = float(sample["ts"])
    return sample


def _check_value(value: Any, spec: tuple[float, float, bool], where: str) -> bool:
    """Raise on a bad value; True when an integer field arrived as a whole float."""
    t = type(value)
    if t is not int and t is not float:
        if value is None:
            raise ProtocolError(400, where, "null: leave an unsupported field out instead")
        raise ProtocolError(400, where, f"must be a number, got {t.__name__}")
    lo, hi, integer = spec
    if is_dcgm_blank(value):
        raise ProtocolError(400, where, f"{value} is a DCGM blank sentinel, not a reading")
    if not lo <= value <= hi:  # also false for NaN
        raise ProtocolError(400, where, f"{value} is outside [{lo:g}, {hi:g}]")
    if integer and t is float:
        if not value.is_integer():
            raise ProtocolError(400, where, "must be an integer")
        return True
    return False


def _entity_key(kind: str, key: str, value: Any, where: str) -> Any:
    if key == "gpu":
        if type(value) is not int or not 0 <= value < 1024:
            raise ProtocolError(400, where, "required GPU index 0..1023")
        return value
    if type(value) is not str or not value or len(value) > 100:
        raise ProtocolError(400, where, f"required {key} name (1-100 characters)")
    return value


def _timestamp(ts: Any, where: str, what: str, oldest: float, newest: float) -> float:
    """Check one `ts` against the window the server accepts; `what` names it in the reason."""
    if type(ts) is not float and type(ts) is not int:
        raise ProtocolError(400, where, "required Unix time in seconds")
    if not math.isfinite(ts) or ts < 1_000_000_000:
        raise ProtocolError(400, where, f"{ts} is not a plausible Unix time")
    now = oldest + MAX_PAST_S
    if ts < oldest:
        raise ProtocolError(
            400,
            where,
            f"{what} is {_duration(now - ts)} old; the server accepts {what}s up to "
            f"{MAX_PAST_S / 3600:g} h old (check the agent's clock)",
        )
    if ts > newest:
        raise ProtocolError(
            400,
            where,
            f"{what} is {_duration(ts - now)} in the future by the server's clock; the server "
            f"accepts {what}s up to {MAX_FUTURE_S:g} s ahead (check the agent's clock)",
        )
    return float(ts)


def _duration(seconds: float) -> str:
    """A span as people say it (`3 days`, `25.5 h`, `17 min`, `301 s`), precise enough
    near the bounds that it never reads the same as the bound it broke."""
    if seconds >= 2 * 86_400:
        return f"{seconds / 86_400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _list_of_objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = obj.get(key)
    if value is None:
        return []
    if type(value) is not list:
        raise ProtocolError(400, key, "must be a list of objects")
    for i, item in enumerate(value):
        if type(item) is not dict:
            raise ProtocolError(400, f"{key}[{i}]", f"must be an object, got {_json_type(item)}")
    return value


def _json_type(value: Any) -> str:
    """A value's type as JSON names it, for reasons an agent's author reads."""
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), type(value).__name__)


_JSON_TYPES = {
    bool: "boolean",
    int: "number",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def _object(obj: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is not None and type(value) is not dict:
        raise ProtocolError(400, key, "must be an object")
    return value


def _event(i: int, event: dict[str, Any], oldest: float, newest: float) -> dict[str, Any]:
    where = f"events[{i}]"
    _timestamp(event.get("ts"), f"{where}.ts", "event", oldest, newest)
    kind = event.get("kind")
    # Type first: a list or an object is not hashable, and must still be this field's 400.
    if type(kind) is not str or kind not in _EVENT_KINDS:
        got = repr(kind)[:40] if type(kind) is str else _json_type(kind)
        raise ProtocolError(
            400, f"{where}.kind", f"must be one of {sorted(_EVENT_KINDS)}, got {got}"
        )
    gpu = event.get("gpu")
    if gpu is not None and (type(gpu) is not int or not 0 <= gpu <= 1023):
        raise ProtocolError(400, f"{where}.gpu", "must be a GPU index 0..1023")
    code = event.get("code")
    if code is not None and (type(code) is not int or not _INT64_MIN <= code <= _INT64_MAX):
        raise ProtocolError(400, f"{where}.code", "must be a 64-bit integer")
    detail = event.get("detail")
    if detail is not None and (type(detail) is not str or "\x00" in detail):
        raise ProtocolError(400, f"{where}.detail", "must be text without NUL characters")
    return event
