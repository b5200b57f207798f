"""Types are exact and a batch says each thing once (issue 11): `protocol` an integer,
`sent_at` a finite number, no key a sample kind does not have, integers bounded to what
the database stores, and no two samples for one entity and time."""

from __future__ import annotations

from typing import Any

import pytest

from agents.protocol.validate import validate_batch
from tests.support.batches import NOW, batch, refused


@pytest.mark.parametrize("value", [True, 1.0, "1", None])
def test_protocol_must_be_the_integer_1(value: Any) -> None:
    assert refused(batch(protocol=value)).field == "protocol"


@pytest.mark.parametrize("value", ["now", True, [], {}, 2**64, -(2**64)])
def test_sent_at_must_be_a_number_when_present(value: Any) -> None:
    assert refused(batch(sent_at=value)).field == "sent_at"


@pytest.mark.parametrize("value", [NOW, int(NOW)], ids=["float", "int"])
def test_a_numeric_sent_at_passes(value: float) -> None:
    validate_batch(batch(sent_at=value), NOW)


def test_a_seq_beyond_64_bits_is_refused_by_the_validator() -> None:
    error = refused(batch(seq=2**63))
    assert error.field == "seq" and "64-bit" in error.reason
    validate_batch(batch(seq=2**63 - 1), NOW)


@pytest.mark.parametrize("count", [1, 3])
def test_a_gpu_key_in_a_node_sample_is_refused_not_dropped(count: int) -> None:
    samples = [{"ts": NOW - i, "cpu_pct": 5.0, "gpu": 0} for i in range(count)]
    error = refused(batch(node=samples))
    assert error.field == "node[0].gpu" and "unknown" in error.reason


def test_a_gpu_key_in_a_facility_sample_is_refused() -> None:
    samples = [{"ts": NOW - i, "pue": 1.2, "gpu": 3} for i in range(2)]
    obj = {"protocol": 1, "source": "site:s", "seq": 1, "facility": samples}
    assert refused(obj).field == "facility[0].gpu"


def gpu(i: int, ts: float, power: float) -> dict[str, Any]:
    return {"ts": ts, "gpu": i, "power_w": power, "temp_gpu_c": 50}


def test_two_samples_for_one_gpu_and_time_are_refused_naming_both() -> None:
    samples = [gpu(i, NOW - 1, 100.0) for i in range(8)]
    samples[7] = gpu(2, NOW - 1, 200.0)  # GPU 2 again, same ts: 100 W or 200 W?
    error = refused(batch(gpu=samples))
    assert error.field == "gpu[7]"
    assert error.reason.startswith("gpu[2] and gpu[7]: the same GPU 2 at ts ")


def test_duplicates_are_found_on_the_slow_path_too() -> None:
    samples = [gpu(0, NOW - 1, 100.0), {"ts": NOW - 1, "gpu": 0, "power_w": 200}]
    error = refused(batch(gpu=samples))
    assert error.reason.startswith("gpu[0] and gpu[1]: the same GPU 0")


def test_a_whole_float_and_an_integer_time_are_the_same_time() -> None:
    samples = [{"ts": int(NOW), "cpu_pct": 1.0}, {"ts": float(int(NOW)), "cpu_pct": 2.0}]
    assert refused(batch(node=samples)).reason.startswith("node[0] and node[1]: the same node")


def test_feeds_are_told_apart_by_rack_and_feed() -> None:
    ts = NOW - 1
    feeds = [
        {"ts": ts, "rack": "A01", "feed": "A", "power_w": 1.0},
        {"ts": ts, "rack": "A01", "feed": "B", "power_w": 1.0},
        {"ts": ts, "rack": "A02", "feed": "A", "power_w": 1.0},
    ]
    obj = {"protocol": 1, "source": "site:s", "seq": 1, "feed": feeds}
    validate_batch(obj, NOW)
    feeds.append({"ts": ts, "rack": "A02", "feed": "A", "power_w": 2.0})
    assert refused(obj).reason.startswith("feed[2] and feed[3]: the same rack A02 feed A")


def test_one_gpu_at_different_times_and_gpus_at_one_time_pass() -> None:
    samples = [gpu(i, NOW - t, 100.0) for t in (1, 2) for i in range(8)]
    assert len(validate_batch(batch(gpu=samples), NOW).samples["gpu"]) == 16
