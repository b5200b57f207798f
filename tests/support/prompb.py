"""Prometheus's remote-write messages (prometheus/prometheus:prompb/remote.proto and
prompb/types.proto, the fields remote write 1.0 uses) as real protobuf classes, built at test
time from a descriptor (google.protobuf's descriptor_pb2 + message_factory): no protoc, no
generated files. For checking the server's hand encoder (fleet/remote_write/wire.py)."""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _field(
    msg: Any, name: str, number: int, kind: int, repeated: bool, type_name: str = ""
) -> None:
    f = msg.field.add()
    f.name, f.number, f.type = name, number, kind
    f.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name:
        f.type_name = type_name


@cache
def write_request_class() -> Any:
    """The `prometheus.WriteRequest` message class."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="fleetwatch_test_prompb.proto", package="prometheus", syntax="proto3"
    )
    label = proto.message_type.add(name="Label")
    _field(label, "name", 1, _F.TYPE_STRING, False)
    _field(label, "value", 2, _F.TYPE_STRING, False)
    sample = proto.message_type.add(name="Sample")
    _field(sample, "value", 1, _F.TYPE_DOUBLE, False)
    _field(sample, "timestamp", 2, _F.TYPE_INT64, False)
    series = proto.message_type.add(name="TimeSeries")
    _field(series, "labels", 1, _F.TYPE_MESSAGE, True, ".prometheus.Label")
    _field(series, "samples", 2, _F.TYPE_MESSAGE, True, ".prometheus.Sample")
    request = proto.message_type.add(name="WriteRequest")
    _field(request, "timeseries", 1, _F.TYPE_MESSAGE, True, ".prometheus.TimeSeries")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("prometheus.WriteRequest"))


def decode(body: bytes) -> list[tuple[list[tuple[str, str]], list[tuple[int, float]]]]:
    """An uncompressed WriteRequest as (labels, samples) per series."""
    message = write_request_class()()
    message.ParseFromString(body)
    return [
        (
            [(label.name, label.value) for label in ts.labels],
            [(s.timestamp, s.value) for s in ts.samples],
        )
        for ts in message.timeseries
    ]
