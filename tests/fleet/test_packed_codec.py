"""The packed span codec gives back exactly what it was given: floats bit for bit, integers of
any 64-bit size, NULLs as NULLs; bytes it did not write are refused with a clear error."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.storage.packed_codec import CodecError, Value, pack, unpack
from tests.support import packed_codec_python as first_codec

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _bits(column: list[Value]) -> list[object]:
    """Floats as their 8 bytes (NaN == NaN, -0.0 != 0.0), ints and None as themselves."""
    return [struct.pack("<d", v) if isinstance(v, float) else v for v in column]


def _same(a: list[list[Value]], b: list[list[Value]]) -> bool:
    return [_bits(c) for c in a] == [_bits(c) for c in b]


def _round_trip(columns: list[list[Value]], integers: list[bool]) -> list[list[Value]]:
    return unpack(pack(columns, integers), integers)


def test_a_span_of_samples_reads_back_exactly() -> None:
    ts: list[Value] = [1_765_000_000.0 + i for i in range(300)]
    power: list[Value] = [312.45 + (i % 7) * 0.01 for i in range(300)]
    counter: list[Value] = [10**12 + 700_000 * i for i in range(300)]
    columns = [ts, power, counter]
    back = _round_trip(columns, [False, False, True])
    assert _same(back, columns)
    assert all(type(v) is int for v in back[2])
    assert all(type(v) is float for v in back[1])


def test_nulls_read_back_as_nulls_wherever_they_are() -> None:
    columns: list[list[Value]] = [
        [1.0, 2.0, 3.0, 4.0],
        [None, 5.5, None, 7.25],
        [None, None, None, None],
        [3, None, None, -4],
    ]
    assert _same(_round_trip(columns, [False, False, False, True]), columns)


def test_nan_infinities_and_negative_zero_keep_their_bits() -> None:
    nan_payload = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_1234))[0]
    column: list[Value] = [math.nan, -0.0, math.inf, -math.inf, 1e300, 5e-324, nan_payload]
    back = _round_trip([column], [False])
    assert _same(back, [column])
    assert struct.pack("<d", back[0][6]) == struct.pack("<d", nan_payload)


def test_negative_and_the_largest_integers_survive_wrapping_differences() -> None:
    column: list[Value] = [INT64_MAX, INT64_MIN, INT64_MAX, -1, 0, INT64_MIN, 1]
    assert _round_trip([column], [True]) == [column]


def test_a_single_sample_and_an_empty_span_round_trip() -> None:
    assert _round_trip([[1_765_000_000.5], [7]], [False, True]) == [[1_765_000_000.5], [7]]
    assert _round_trip([[], []], [False, True]) == [[], []]


def test_repetitive_readings_pack_far_smaller_than_eight_bytes_a_value() -> None:
    ts = [1_765_000_000.0 + i for i in range(300)]
    temps = [45.0 + (i // 30) for i in range(300)]
    data = pack([ts, temps], [False, False])
    assert len(data) < 300 * 2 * 8 / 20


def test_an_integer_beyond_64_bits_is_refused() -> None:
    with pytest.raises(CodecError, match="64 bits"):
        pack([[2**63]], [True])


def test_columns_of_unequal_length_are_refused() -> None:
    with pytest.raises(CodecError, match="length"):
        pack([[1.0, 2.0], [1.0]], [False, False])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "too short"),
        (b"\x09" + bytes(6), "version"),
        (b"\x01" + bytes(6) + b"zz", "decompress"),
    ],
)
def test_bytes_the_codec_did_not_write_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        unpack(data, [])


def test_a_span_read_with_the_wrong_columns_is_refused() -> None:
    data = pack([[1.0], [2.0]], [False, False])
    with pytest.raises(CodecError, match="2 columns"):
        unpack(data, [False])


floats = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
decimals = st.integers(-(10**9), 10**9).map(lambda q: q / 100)
int64 = st.integers(INT64_MIN, INT64_MAX)


@st.composite
def spans(draw: st.DrawFn) -> tuple[list[list[Value]], list[bool]]:
    n = draw(st.integers(0, 40))
    integers = draw(st.lists(st.booleans(), min_size=1, max_size=5))
    columns: list[list[Value]] = []
    for integer in integers:
        values = int64 if integer else draw(st.sampled_from([floats, decimals]))
        columns.append(draw(st.lists(st.one_of(st.none(), values), min_size=n, max_size=n)))
    return columns, integers


@settings(max_examples=300, deadline=None)
@given(spans())
def test_any_span_reads_back_exactly(span: tuple[list[list[Value]], list[bool]]) -> None:
    columns, integers = span
    assert _same(_round_trip(columns, integers), columns)


@settings(max_examples=300, deadline=None)
@given(spans())
def test_spans_pack_to_the_same_bytes_as_the_first_codec_wrote(
    span: tuple[list[list[Value]], list[bool]],
) -> None:
    # Spans on disk were packed by the pure-Python codec: the NumPy one writes what it
    # wrote, and each reads what the other packed.
    columns, integers = span
    assert pack(columns, integers) == first_codec.pack(columns, integers)
    assert _same(unpack(first_codec.pack(columns, integers), integers), columns)
    assert _same(first_codec.unpack(pack(columns, integers), integers), columns)


def test_the_peer_streams_columns_pack_as_the_first_codec_did() -> None:
    # The modes real readings take: decimals of 0-3 places, float noise (XOR), counters,
    # a column with a gap, one all NULL.
    n = 600
    ts = [1_765_000_000.0 + i for i in range(n)]
    power = [round(500 + 37.5 * math.sin(i / 7), 3) for i in range(n)]
    noise = [math.sin(i) * 1e-3 for i in range(n)]
    energy = [10**12 + 713 * i for i in range(n)]
    gappy: list[Value] = [None if i % 50 < 3 else float(i % 7) for i in range(n)]
    columns: list[list[Value]] = [ts, power, noise, energy, gappy, [None] * n]  # type: ignore[list-item]
    integers = [False, False, False, True, False, False]
    assert pack(columns, integers) == first_codec.pack(columns, integers)
