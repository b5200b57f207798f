"""Remote write 1.0 on the wire: a protobuf `WriteRequest`, snappy block-compressed.

Spec: https://prometheus.io/docs/specs/prw/remote_write_spec/ (version 1.0). Schema:
prometheus/prometheus:prompb/remote.proto and prompb/types.proto —

    WriteRequest { repeated TimeSeries timeseries = 1; }
    TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
    Label        { string name = 1; string value = 2; }
    Sample       { double value = 1; int64 timestamp = 2; }   // milliseconds

Hand-encoded: the whole message needs three wire types (protobuf.dev/programming-guides/
encoding: varint, 64-bit, length-delimited), so the server carries no generated classes. A
series' labels are encoded once (`encode_labels`) and reused for every request that carries
it. The body is snappy's *block* format (`cramjam.snappy.compress_raw`); the framed format
must not be used.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import cramjam

from agents import __version__

__all__ = (
    "HEADERS",
    "SeriesSamples",
    "compress",
    "encode_labels",
    "encode_write_request",
)

# The four headers the spec requires; not configurable (the spec forbids overriding them).
HEADERS: dict[str, str] = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "User-Agent": f"fleetwatch/{__version__}",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}

# (a series' encoded labels, its samples as (timestamp ms, value), oldest first)
SeriesSamples = tuple[bytes, Sequence[tuple[int, float]]]

_DOUBLE = struct.Struct("<d")
_TIMESERIES = b"\x0a"  # WriteRequest.timeseries: field 1, length-delimited
_LABEL = b"\x0a"  # TimeSeries.labels: field 1, length-delimited
_SAMPLE = b"\x12"  # TimeSeries.samples: field 2, length-delimited
_NAME = b"\x0a"  # Label.name: field 1, length-delimited
_VALUE_STR = b"\x12"  # Label.value: field 2, length-delimited
_VALUE = b"\x09"  # Sample.value: field 1, 64-bit
_TIMESTAMP = b"\x10"  # Sample.timestamp: field 2, varint


def _varint(n: int) -> bytes:
    """Unsigned base-128 varint (lengths and today's positive millisecond timestamps)."""
    if n < 0:
        raise ValueError(f"a varint here is never negative: {n}")
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def encode_labels(labels: Iterable[tuple[str, str]]) -> bytes:
    """A series' `Label` fields, sorted by name as the spec requires; empty values are
    left out (the spec forbids them: an absent label and an empty one are the same)."""
    out = bytearray()
    for name, value in sorted(labels):
        if not value:
            continue
        pair = _delimited(_NAME, name.encode()) + _delimited(_VALUE_STR, value.encode())
        out += _delimited(_LABEL, pair)
    return bytes(out)


def _sample(ts_ms: int, value: float) -> bytes:
    payload = _VALUE + _DOUBLE.pack(value) + _TIMESTAMP + _varint(ts_ms)
    # 9 + 1 + a timestamp varint of at most 10 bytes: the length fits in one byte
    return _SAMPLE + bytes((len(payload),)) + payload


def encode_write_request(series: Iterable[SeriesSamples]) -> bytes:
    """The uncompressed `WriteRequest` of these series (samples of one series in time order)."""
    out = bytearray()
    for labels, samples in series:
        body = bytearray(labels)
        for ts_ms, value in samples:
            body += _sample(ts_ms, value)
        out += _TIMESERIES + _varint(len(body)) + body
    return bytes(out)


def compress(body: bytes) -> bytes:
    """Snappy block format, as remote write requires (never the framed format)."""
    return bytes(cramjam.snappy.compress_raw(body))
