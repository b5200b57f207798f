"""The packed span codec as first written, over Python objects (`array`, `map` with
`operator`): kept as the oracle for fleet/storage/packed_codec.py, which does the same
per-value work with NumPy. Spans already on disk were written by this one, so the two must
agree byte for byte (tests/fleet/test_packed_codec.py)."""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from itertools import accumulate, chain, repeat
from operator import and_, is_, lshift, mul, neg, rshift, sub, truediv, xor
from typing import cast

Value = float | int | None

VERSION = 1
WORD = 8  # bytes per encoded value
MASK64 = (1 << 64) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_DECIMALS = 6
# zlib (the standard library's DEFLATE) at its default level. Measured in bench/packing.py
# on the peer stream (docs/benchmarks.md): zstd (a new dependency) was 0.5 % smaller at
# level 3 and 5 % at level 9, zlib's level 9 1 % smaller at a third more packing time:
# the shuffled body leaves the compressor little to choose between.
ZLIB_LEVEL = 6

# Column modes
ALL_NULL, INTEGERS, DECIMAL, FLOAT_XOR = 0, 1, 2, 3

_HEADER = struct.Struct("<BIH")  # version, samples, columns
_COLUMN = struct.Struct("<BBB")  # mode, decimals, has nulls
_BIG_ENDIAN = sys.byteorder == "big"


class CodecError(ValueError):
    """Bytes that are not a packed span this codec wrote, or values it cannot store."""


def pack(columns: Sequence[Sequence[Value]], integers: Sequence[bool]) -> bytes:
    """Encode equally long `columns` (the first is usually `ts`); `integers[i]` says column
    i holds 64-bit integers (else floats)."""
    n = len(columns[0]) if columns else 0
    body = encode_body(columns, integers)
    return _HEADER.pack(VERSION, n, len(columns)) + zlib.compress(body, ZLIB_LEVEL)


def encode_body(columns: Sequence[Sequence[Value]], integers: Sequence[bool]) -> bytes:
    """What `pack` compresses: each column's head, then each column's mask and words."""
    if len(columns) != len(integers):
        raise CodecError("one integer flag per column")
    n = len(columns[0]) if columns else 0
    heads: list[bytes] = []
    bodies: list[bytes] = []
    for values, integer in zip(columns, integers, strict=True):
        if len(values) != n:
            raise CodecError("columns differ in length")
        head, body = _pack_column(values, integer)
        heads.append(head)
        bodies.append(body)
    return b"".join(chain(heads, bodies))


def column_count(data: bytes) -> int:
    """How many columns a packed span holds (from its header)."""
    try:
        return int(_HEADER.unpack_from(data)[2])
    except struct.error as exc:
        raise CodecError("too short for a packed span") from exc


def unpack(data: bytes, integers: Sequence[bool]) -> list[list[Value]]:
    """The columns `pack` was given, value for value (integers as int, floats as float)."""
    try:
        version, n, count = _HEADER.unpack_from(data)
    except struct.error as exc:
        raise CodecError("too short for a packed span") from exc
    if version != VERSION:
        raise CodecError(f"packed span version {version}, this codec reads {VERSION}")
    if count != len(integers):
        raise CodecError(f"packed span has {count} columns, expected {len(integers)}")
    try:
        raw = zlib.decompress(data[_HEADER.size :])
    except zlib.error as exc:
        raise CodecError(f"packed span does not decompress: {exc}") from exc
    offset = _COLUMN.size * count
    out: list[list[Value]] = []
    for i, integer in enumerate(integers):
        mode, decimals, has_nulls = _COLUMN.unpack_from(raw, _COLUMN.size * i)
        mask = raw[offset : offset + n] if has_nulls else b""
        offset += len(mask)
        if mode == ALL_NULL:
            out.append([None] * n)
            continue
        words = _unshuffle(raw[offset : offset + WORD * n])
        offset += WORD * n
        values = _decode_words(words, mode, decimals, integer)
        if has_nulls:
            values = [None if null else v for v, null in zip(values, mask, strict=True)]
        out.append(values)
    if offset != len(raw):
        raise CodecError("packed span has trailing or missing bytes")
    return out


# -- one column ------------------------------------------------------------------------


def _pack_column(values: Sequence[Value], integer: bool) -> tuple[bytes, bytes]:
    has_nulls = any(map(is_, values, repeat(None)))
    mask = bytes(map(is_, values, repeat(None))) if has_nulls else b""
    filled = _fill_nulls(values) if has_nulls else cast("list[float | int]", list(values))
    if filled is None:
        return _COLUMN.pack(ALL_NULL, 0, 1), mask
    if integer:
        ints = list(map(int, filled))
        if ints and (min(ints) < INT64_MIN or max(ints) > INT64_MAX):
            raise CodecError("an integer outside 64 bits")
        mode, decimals, words = INTEGERS, 0, _delta_zigzag(ints)
    else:
        floats = array("d", filled)
        decimals_or_none = _decimal_scale(floats)
        if decimals_or_none is None:
            mode, decimals, words = FLOAT_XOR, 0, _xor_previous(floats)
        else:
            decimals = decimals_or_none
            quantised = list(map(round, map(mul, floats, repeat(10.0**decimals))))
            mode, words = DECIMAL, _delta_zigzag(quantised)
    head = _COLUMN.pack(mode, decimals, int(has_nulls))
    return head, (mask if has_nulls else b"") + _shuffle(words)


def _fill_nulls(values: Sequence[Value]) -> list[float | int] | None:
    """Each NULL replaced by the value before it (the first ones by the first value), so it
    encodes as no change. None when every value is NULL."""
    first = next((v for v in values if v is not None), None)
    if first is None:
        return None
    return list(accumulate(values, _keep_previous, initial=first))[1:]


def _keep_previous(previous: float | int, value: Value) -> float | int:
    return previous if value is None else value


def _decimal_scale(floats: array[float]) -> int | None:
    """The fewest decimals k with every value == round(v * 10**k) / 10**k bit for bit
    (so -0.0, NaN and infinities never qualify), the quantised values within 64 bits.
    Tried on a few values first, then confirmed on all."""
    for k in range(MAX_DECIMALS + 1):
        if _reads_back(floats[:16], k) and _reads_back(floats, k):
            return k
    return None


def _reads_back(floats: array[float], k: int) -> bool:
    scale = 10.0**k
    try:
        quantised = list(map(round, map(mul, floats, repeat(scale))))
    except (ValueError, OverflowError):  # NaN, infinity
        return False
    if quantised and (min(quantised) < INT64_MIN or max(quantised) > INT64_MAX):
        return False
    back = array("d", map(truediv, quantised, repeat(scale)))
    return back.tobytes() == floats.tobytes()


def _delta_zigzag(ints: Sequence[int]) -> array[int]:
    """Differences from the previous value, wrapped to signed 64 bits, zigzag-folded."""
    wrapped = array("Q", map(and_, map(sub, ints, chain((0,), ints)), repeat(MASK64)))
    signed = array("q", wrapped.tobytes())
    return array("Q", map(xor, map(lshift, signed, repeat(1)), map(rshift, signed, repeat(63))))


def _undo_delta_zigzag(words: array[int]) -> array[int]:
    deltas = map(xor, map(rshift, words, repeat(1)), map(neg, map(and_, words, repeat(1))))
    wrapped = array("Q", map(and_, accumulate(deltas), repeat(MASK64)))
    return array("q", wrapped.tobytes())


def _xor_previous(floats: array[float]) -> array[int]:
    bits = array("Q", floats.tobytes())
    return array("Q", map(xor, bits, chain((0,), bits)))


def _undo_xor_previous(words: array[int]) -> array[float]:
    return array("d", array("Q", accumulate(words, xor)).tobytes())


def _decode_words(words: array[int], mode: int, decimals: int, integer: bool) -> list[Value]:
    if mode == FLOAT_XOR:
        return list(_undo_xor_previous(words))
    if mode not in (INTEGERS, DECIMAL):
        raise CodecError(f"unknown column mode {mode}")
    ints = _undo_delta_zigzag(words)
    if mode == INTEGERS:
        return list(ints) if integer else list(map(float, ints))
    return list(map(truediv, ints, repeat(10.0**decimals)))


# -- byte shuffle ----------------------------------------------------------------------


def _shuffle(words: array[int]) -> bytes:
    if _BIG_ENDIAN:
        words = array("Q", words)
        words.byteswap()
    data = words.tobytes()
    return b"".join(data[i::WORD] for i in range(WORD))


def _unshuffle(data: bytes) -> array[int]:
    if len(data) % WORD:
        raise CodecError("packed column is not whole 64-bit words")
    n = len(data) // WORD
    out = bytearray(len(data))
    for i in range(WORD):
        out[i::WORD] = data[i * n : (i + 1) * n]
    words = array("Q", bytes(out))
    if _BIG_ENDIAN:
        words.byteswap()
    return words
