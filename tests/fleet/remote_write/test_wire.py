"""Remote write's hand encoder (fleet/remote_write/wire.py) read back by real protobuf classes
of Prometheus's schema, and its snappy body by a snappy block decoder."""

from __future__ import annotations

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.remote_write import wire
from tests.support import prompb

NOW_MS = 1_796_000_000_123


def test_a_write_request_decodes_to_the_same_series_labels_and_samples() -> None:
    cpu = wire.encode_labels([("node", "gpu-a01-01"), ("__name__", "fleetwatch_raw_node_cpu_pct")])
    gpu = wire.encode_labels(
        [("site", "lab"), ("gpu", "3"), ("__name__", "fleetwatch_raw_gpu_power_w"), ("uuid", "")]
    )
    body = wire.encode_write_request(
        [(cpu, [(NOW_MS, 12.5), (NOW_MS + 1000, 0.0)]), (gpu, [(NOW_MS, 712.25)])]
    )

    assert prompb.decode(body) == [
        (
            [("__name__", "fleetwatch_raw_node_cpu_pct"), ("node", "gpu-a01-01")],
            [(NOW_MS, 12.5), (NOW_MS + 1000, 0.0)],
        ),
        # sorted by name, the empty UUID left out (the spec forbids empty values)
        (
            [("__name__", "fleetwatch_raw_gpu_power_w"), ("gpu", "3"), ("site", "lab")],
            [(NOW_MS, 712.25)],
        ),
    ]


@given(
    labels=st.dictionaries(
        st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,20}", fullmatch=True),
        st.text(min_size=1, max_size=40),
        min_size=1,
        max_size=6,
    ),
    samples=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=2**62),
            st.floats(allow_nan=False),
        ),
        max_size=30,
    ),
)
def test_any_labels_and_samples_survive_the_round_trip(
    labels: dict[str, str], samples: list[tuple[int, float]]
) -> None:
    body = wire.encode_write_request([(wire.encode_labels(labels.items()), samples)])

    [(got_labels, got_samples)] = prompb.decode(body)

    assert got_labels == sorted(labels.items())
    assert got_samples == samples


def test_the_body_is_snappy_block_format_not_framed() -> None:
    body = wire.encode_write_request([(wire.encode_labels([("__name__", "x")]), [(1, 2.0)])] * 50)

    compressed = wire.compress(body)

    assert bytes(cramjam.snappy.decompress_raw(compressed)) == body
    with pytest.raises(cramjam.DecompressionError):
        cramjam.snappy.decompress(compressed)  # the framed format's decoder refuses it


def test_the_headers_are_the_four_the_spec_requires() -> None:
    assert wire.HEADERS["Content-Encoding"] == "snappy"
    assert wire.HEADERS["Content-Type"] == "application/x-protobuf"
    assert wire.HEADERS["X-Prometheus-Remote-Write-Version"] == "0.1.0"
    assert wire.HEADERS["User-Agent"].startswith("fleetwatch/")
