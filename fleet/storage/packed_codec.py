"""One entity's span of samples (its `ts` column and each metric column) <-> bytes, lossless.

The packed raw tier (`fleet.storage.packed`) keeps each sealed span of raw rows as one row
per entity whose `data` is this encoding. Reading back gives exactly what was stored:
floats bit for bit (NaN, infinities and -0.0 included), integers whatever their size within
64 bits, NULLs as NULLs.

Per column, the cheapest of:

- all NULL: nothing stored;
- integers (an integer column, or a float column whose every value is a decimal with at
  most `MAX_DECIMALS` digits after the point that reads back bit-exact as `q / 10**k`,
  which the timestamps and most sensor fields are): the difference from the previous
  value, zigzag-folded so small negatives are small, as 64-bit words;
- other floats: the 64-bit pattern XORed with the previous value's (Gorilla's idea:
  consecutive readings share their sign, exponent and leading mantissa bits).

A NULL stores the previous value (a zero difference) and its place in a null mask. Every
column's words are then byte-shuffled (all first bytes, then all second bytes…: the mostly
zero high bytes form long runs) and the whole body compressed once with zlib. Measured on
the peer bench's value stream in bench/packing.py (docs/benchmarks.md).

The per-value work is NumPy's: no Python loop per value.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from itertools import chain, repeat
from operator import is_
from typing import cast

import numpy as np

Value = float | int | None

VERSION = 1
WORD = 8  # bytes per encoded value
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
# NumPy does the per-value work: on the peer stream the same steps over Python objects
# (`map` with `operator`, `array`) took ~6.5 µs per GPU sample to pack (bench/packing.py),
# most of a packer pass's CPU. The bytes are the same (tests/support/packed_codec_python.py
# is the earlier encoder, kept as the oracle).

_I64 = np.dtype("<i8")
_U64 = np.dtype("<u8")
_F64 = np.dtype("<f8")
_TWO_63 = 2.0**63  # exclusive bound of a quantised value as a float
_DECIMAL_SCALES = 10.0 ** np.arange(MAX_DECIMALS + 1)


def _pack_column(values: Sequence[Value], integer: bool) -> tuple[bytes, bytes]:
    n = len(values)
    null_count = values.count(None)
    if null_count and null_count == n:  # a field nobody reports: most of a kind's columns
        return _COLUMN.pack(ALL_NULL, 0, 1), b"\x01" * n
    has_nulls = null_count > 0
    nulls = np.fromiter(map(is_, values, repeat(None)), bool, n) if has_nulls else None
    mask = nulls.tobytes() if nulls is not None else b""
    if integer:
        mode, decimals, words = INTEGERS, 0, _delta_zigzag(_integers(values, nulls))
    else:
        floats = _floats(values, nulls)
        decimals_or_none = _decimal_scale(floats)
        if decimals_or_none is None:
            mode, decimals, words = FLOAT_XOR, 0, _xor_previous(floats)
        else:
            decimals = decimals_or_none
            quantised = np.rint(floats * 10.0**decimals).astype(_I64)
            mode, words = DECIMAL, _delta_zigzag(quantised)
    head = _COLUMN.pack(mode, decimals, int(has_nulls))
    return head, mask + _shuffle(words)


def _integers(values: Sequence[Value], nulls: np.ndarray | None) -> np.ndarray:
    """The column as int64, each NULL holding the value before it."""
    try:
        if nulls is None:
            return np.array(values, dtype=_I64)
        filled = np.array(values, dtype=object)
        filled[nulls] = 0
        return _fill_forward(filled.astype(_I64), nulls)
    except OverflowError as exc:
        raise CodecError("an integer outside 64 bits") from exc


def _floats(values: Sequence[Value], nulls: np.ndarray | None) -> np.ndarray:
    """The column as float64 (a NULL reads as NaN here and is then overwritten, so only
    the mask, never the value, says NULL), each NULL holding the value before it."""
    floats = np.array(values, dtype=_F64)
    return floats if nulls is None else _fill_forward(floats, nulls)


def _fill_forward(column: np.ndarray, nulls: np.ndarray) -> np.ndarray:
    """Each NULL replaced by the value before it (the first ones by the first value), so it
    encodes as no change."""
    index = np.where(nulls, 0, np.arange(len(column)))
    np.maximum.accumulate(index, out=index)
    first = int(np.argmin(nulls))  # the first non-NULL (the column is not all NULL)
    index[:first] = first
    return column[index]


def _decimal_scale(floats: np.ndarray) -> int | None:
    """The fewest decimals k with every value == rint(v * 10**k) / 10**k bit for bit
    (so -0.0, NaN and infinities never qualify), the quantised values within 64 bits.
    Every k is tried at once: one (k, value) grid, a handful of array operations."""
    if not np.isfinite(floats).all():
        return None
    scales = _DECIMAL_SCALES[:, None]
    with np.errstate(over="ignore", invalid="ignore"):  # out of bounds: refused below
        quantised = np.rint(floats[None, :] * scales)
        within = ((quantised >= -_TWO_63) & (quantised < _TWO_63)).all(axis=1)
        back = np.where(within[:, None], quantised, 0.0).astype(_I64) / scales
    exact = (back.view(_U64) == floats.view(_U64)[None, :]).all(axis=1) & within
    found = np.flatnonzero(exact)
    return int(found[0]) if len(found) else None


def _delta_zigzag(ints: np.ndarray) -> np.ndarray:
    """Differences from the previous value, wrapped to signed 64 bits, zigzag-folded."""
    deltas = np.empty_like(ints)
    if len(ints):
        deltas[0] = ints[0]
        np.subtract(ints[1:], ints[:-1], out=deltas[1:])  # wraps, as int64 arithmetic does
    return ((deltas << 1) ^ (deltas >> 63)).view(_U64)


def _undo_delta_zigzag(words: np.ndarray) -> np.ndarray:
    deltas = (words >> np.uint64(1)) ^ (np.uint64(0) - (words & np.uint64(1)))
    return np.cumsum(deltas, dtype=_U64).view(_I64)  # wraps modulo 2**64


def _xor_previous(floats: np.ndarray) -> np.ndarray:
    bits = floats.view(_U64)
    words = bits.copy()
    words[1:] ^= bits[:-1]
    return words


def _undo_xor_previous(words: np.ndarray) -> np.ndarray:
    return np.bitwise_xor.accumulate(words).view(_F64)


def _decode_words(words: np.ndarray, mode: int, decimals: int, integer: bool) -> list[Value]:
    if mode == FLOAT_XOR:
        return cast("list[Value]", _undo_xor_previous(words).tolist())
    if mode not in (INTEGERS, DECIMAL):
        raise CodecError(f"unknown column mode {mode}")
    ints = _undo_delta_zigzag(words)
    if mode == INTEGERS:
        return cast("list[Value]", (ints if integer else ints.astype(_F64)).tolist())
    return cast("list[Value]", (ints / 10.0**decimals).tolist())


# -- byte shuffle ----------------------------------------------------------------------


def _shuffle(words: np.ndarray) -> bytes:
    """All first bytes of the little-endian words, then all second bytes, …"""
    return words.astype(_U64, copy=False).view(np.uint8).reshape(-1, WORD).T.tobytes()


def _unshuffle(data: bytes) -> np.ndarray:
    if len(data) % WORD:
        raise CodecError("packed column is not whole 64-bit words")
    planes = np.frombuffer(data, dtype=np.uint8).reshape(WORD, -1)
    return np.ascontiguousarray(planes.T).view(_U64).reshape(-1)
