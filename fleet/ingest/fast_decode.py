"""The ingest child's fast path for a batch: decode and check its GPU and node samples in
one compiled pass (msgspec typed Structs built from the metric catalogue), instead of
`orjson.loads` and then Python checks over generic dicts.

What the typed decoder checks, in C, while it parses: every sample is an object of known
fields, with its entity keys and `ts`; each value is a number of its field's type (an
integer field takes no float, a boolean is no number) within the field's catalogue range.
Every other top-level field is kept as raw JSON and decoded by orjson, exactly as the full
path decodes it (orjson and msgspec differ on integers past 64 bits, so free-form blocks
never go through msgspec). `validate_batch` then checks the rest, with the typed kinds'
samples taking only the checks that depend on the moment (`validate_batch`'s `typed`).

It only ever accepts: anything it cannot vouch for (a refusal, a field it does not type,
a whole float in an integer field, which the full validator accepts as an integer) returns
None, and the caller runs the full path, which decides and words any refusal exactly as
it always has. tests/fleet/test_fast_decode.py holds the two to the same answers.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import msgspec
import orjson

from agents.protocol.metrics import ENTITY_KEYS, METRICS, Metric
from agents.protocol.validate import TOP_LEVEL_KEYS, Batch, validate_batch

# Kinds whose samples hold numbers only (no name keys): the typed decoder's.
TYPED_KINDS = frozenset({"gpu", "node"})
_MIN_TS = 1_000_000_000  # the validator's plausible Unix time
_GPU_INDEX = Annotated[int, msgspec.Meta(ge=0, le=1023)]


def _value_type(metric: Metric) -> Any:
    if metric.integer:  # bounds rounded inward: the same integers as lo <= v <= hi
        return Annotated[int, msgspec.Meta(ge=math.ceil(metric.lo), le=math.floor(metric.hi))]
    return Annotated[float, msgspec.Meta(ge=metric.lo, le=metric.hi)]


def _sample_struct(kind: str) -> type[msgspec.Struct]:
    """One kind's sample: `ts`, its entity keys, then each metric, absent when not sent."""
    fields: list[Any] = [("ts", Annotated[float, msgspec.Meta(ge=_MIN_TS)])]
    for key in ENTITY_KEYS[kind]:
        if key != "gpu":
            raise ValueError(f"{kind} samples have a name key ({key}): not a typed kind")
        fields.append((key, _GPU_INDEX))
    fields += [(m.name, _value_type(m) | msgspec.UnsetType, msgspec.UNSET) for m in METRICS[kind]]
    return msgspec.defstruct(f"{kind.title()}Sample", fields, forbid_unknown_fields=True)


def _batch_struct() -> type[msgspec.Struct]:
    fields: list[Any] = []
    for key in sorted(TOP_LEVEL_KEYS):
        if key in TYPED_KINDS:
            sample = _sample_struct(key)
            kind_type: Any = list[sample]  # type: ignore[valid-type]
            fields.append((key, kind_type | msgspec.UnsetType, msgspec.UNSET))
        else:
            fields.append((key, msgspec.Raw | msgspec.UnsetType, msgspec.UNSET))
    return msgspec.defstruct("WireBatch", fields, forbid_unknown_fields=True)


_WIRE = _batch_struct()
_FIELDS: tuple[str, ...] = _WIRE.__struct_fields__
_DECODER = msgspec.json.Decoder(_WIRE)


def fast_batch(payload: bytes, now: float) -> Batch | None:
    """The batch, when the typed decoder and the validator both accept it; else None
    (the full path, `orjson.loads` then `validate_batch`, answers it)."""
    try:
        wire = _DECODER.decode(payload)
        obj: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(wire, name)
            if value is msgspec.UNSET:
                continue
            if name in TYPED_KINDS:
                obj[name] = msgspec.to_builtins(value)
            else:
                obj[name] = orjson.loads(bytes(value))
        return validate_batch(obj, now, TYPED_KINDS)
    except Exception:  # whatever it is, the full path decides and words it
        return None
