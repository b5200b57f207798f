"""Modbus register maps: one JSON file per meter family in `profiles/modbus/`.

A map states each metric's function code (3 holding, 4 input), register number
as the vendor documents it plus the map's `register_base` (so the JSON can be
checked line by line against the manual), data type, word order and unit. The
collector reads contiguous registers in as few requests as the map allows.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAP_DIR = Path(__file__).resolve().parent / "profiles" / "modbus"
TYPES = {"float32": (2, ">f"), "int16": (1, ">h"), "uint16": (1, ">H"), "int32": (2, ">i")}
TYPES |= {"uint32": (2, ">I"), "int64": (4, ">q"), "uint64": (4, ">Q")}
_COMBINE = ("first", "sum", "max", "mean")


@dataclass(frozen=True, slots=True)
class RegisterSpec:
    metric: str
    function: int  # 3 holding, 4 input
    addresses: tuple[int, ...]  # zero-based PDU addresses
    data_type: str
    combine: str
    scale: float
    unit: str

    @property
    def width(self) -> int:
        return TYPES[self.data_type][0]


@dataclass(frozen=True, slots=True)
class RegisterMap:
    name: str
    family: str
    high_word_first: bool
    max_registers_per_read: int
    metrics: tuple[RegisterSpec, ...]


def load_map(name: str, directory: Path = MAP_DIR) -> RegisterMap:
    path = directory / f"{name}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.json")))
        raise ValueError(f"no Modbus register map {name!r} (known: {known})")
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    base = int(raw.get("register_base", 0))
    order = raw.get("word_order", "high_first")
    if order not in ("high_first", "low_first"):
        raise ValueError(f"{name}: word_order must be high_first or low_first")
    return RegisterMap(
        name=name,
        family=str(raw["family"]),
        high_word_first=order == "high_first",
        max_registers_per_read=int(raw.get("max_registers_per_read", 60)),
        metrics=tuple(_spec(metric, spec, base) for metric, spec in raw["metrics"].items()),
    )


def _spec(metric: str, spec: dict[str, Any], base: int) -> RegisterSpec:
    registers = spec.get("registers") or [spec["register"]]
    if spec["type"] not in TYPES:
        raise ValueError(f"{metric}: type must be one of {', '.join(TYPES)}")
    if int(spec["function"]) not in (3, 4):
        raise ValueError(f"{metric}: function must be 3 (holding) or 4 (input)")
    combine = str(spec.get("combine", "first"))
    if combine not in _COMBINE:
        raise ValueError(f"{metric}: combine must be one of {_COMBINE}")
    return RegisterSpec(
        metric=metric,
        function=int(spec["function"]),
        addresses=tuple(int(r) - base for r in registers),
        data_type=str(spec["type"]),
        combine=combine,
        scale=float(spec.get("scale", 1.0)),
        unit=str(spec["unit"]),
    )


def decode(words: list[int], data_type: str, high_word_first: bool) -> float | None:
    """Registers -> number; NaN/inf (meters' "not available") -> None."""
    ordered = words if high_word_first else list(reversed(words))
    raw = b"".join(struct.pack(">H", w & 0xFFFF) for w in ordered)
    value = float(struct.unpack(TYPES[data_type][1], raw)[0])
    return value if math.isfinite(value) else None


def encode(value: float, data_type: str, high_word_first: bool) -> list[int]:
    """The inverse of `decode`, for the loopback meter."""
    fmt = TYPES[data_type][1]
    number: float | int = value if data_type == "float32" else round(value)
    raw = struct.pack(fmt, number)
    words = [struct.unpack(">H", raw[i : i + 2])[0] for i in range(0, len(raw), 2)]
    return words if high_word_first else list(reversed(words))


@dataclass(frozen=True, slots=True)
class Block:
    function: int
    start: int
    count: int


def plan_reads(register_map: RegisterMap) -> list[Block]:
    """Merge the map's registers into as few reads as `max_registers_per_read` allows."""
    spans = sorted(
        (spec.function, address, address + spec.width)
        for spec in register_map.metrics
        for address in spec.addresses
    )
    blocks: list[Block] = []
    for function, start, end in spans:
        last = blocks[-1] if blocks else None
        if (
            last is not None
            and last.function == function
            and end - last.start <= register_map.max_registers_per_read
        ):
            blocks[-1] = Block(function, last.start, max(last.count, end - last.start))
        else:
            blocks.append(Block(function, start, end - start))
    return blocks
