"""The JSON Schema and the hot-path validator state the same protocol."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agents.protocol import docs, schema
from agents.protocol.validate import ProtocolError, validate_batch

ROOT = Path(__file__).resolve().parents[2]
NOW = time.time()


def full_batch() -> dict[str, Any]:
    return {
        "protocol": 1,
        "source": "node:gpu-a01-01",
        "seq": 3,
        "sent_at": NOW,
        "gpu": [
            {
                "ts": NOW,
                "gpu": 0,
                "util_gpu_pct": 97,
                "temp_gpu_c": 61,
                "power_w": 689.5,
                "clock_event_reasons": 4,
                "energy_j": 2564793.0,
                "violation_power_ns": 123456789,
            }
        ],
        "node": [{"ts": NOW, "cpu_pct": 12.5, "temp_inlet_c": 24.0, "power_w": 5230}],
        "facility": [{"ts": NOW, "total_power_w": 1.3e6, "it_power_w": 1.05e6, "pue_category": 2}],
        "rack": [{"ts": NOW, "rack": "A01", "power_w": 98200.0}],
        "events": [{"ts": NOW, "gpu": 0, "kind": "xid", "code": 79, "detail": "fell off the bus"}],
        "gpu_info": [{"gpu": 0, "uuid": "GPU-1", "limits": {"slowdown_c": 89}}],
    }


def test_schema_file_is_generated_from_the_catalogue() -> None:
    on_disk = (ROOT / "agents/protocol/schema-v1.json").read_text()
    assert on_disk == schema.render(), "run: python -m agents.protocol.schema > ..."


def test_metrics_doc_is_generated_from_the_catalogue() -> None:
    assert (ROOT / "docs/metrics.md").read_text() == docs.render()


def test_a_full_batch_passes_both_the_schema_and_the_validator() -> None:
    batch = full_batch()
    jsonschema.validate(batch, schema.batch_schema())
    validated = validate_batch(copy.deepcopy(batch), NOW)
    assert validated.gpu_samples == 1 and validated.seq == 3


BAD = [
    ("unknown metric", lambda b: b["gpu"][0].update(bogus_c=1)),
    ("out of range", lambda b: b["gpu"][0].update(temp_gpu_c=900)),
    ("negative power", lambda b: b["node"][0].update(power_w=-1)),
    ("bool value", lambda b: b["gpu"][0].update(util_gpu_pct=True)),
    ("null value", lambda b: b["gpu"][0].update(power_w=None)),
    ("string value", lambda b: b["gpu"][0].update(power_w="689")),
    ("missing ts", lambda b: b["node"][0].pop("ts")),
    ("missing gpu index", lambda b: b["gpu"][0].pop("gpu")),
    ("integer field fraction", lambda b: b["gpu"][0].update(pstate=1.5)),
    ("int64 sentinel", lambda b: b["gpu"][0].update(violation_power_ns=9223372036854775794)),
    ("unknown top-level", lambda b: b.update(extra=1)),
    ("bad source", lambda b: b.update(source="gpu-a01-01")),
    ("wrong protocol", lambda b: b.update(protocol=2)),
    ("negative seq", lambda b: b.update(seq=-1)),
    ("bad event kind", lambda b: b["events"][0].update(kind="boom")),
    ("rack without name", lambda b: b["rack"][0].pop("rack")),
]


@pytest.mark.parametrize(("case", "mutate"), BAD, ids=[c for c, _ in BAD])
def test_schema_and_validator_refuse_the_same_bad_batches(case: str, mutate: Any) -> None:
    batch = full_batch()
    mutate(batch)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(batch, schema.batch_schema())
    with pytest.raises(ProtocolError) as refused:
        validate_batch(json.loads(json.dumps(batch)), NOW)
    assert refused.value.code == 400


@pytest.mark.parametrize("value", [2147483632, 2147483635, 9223372036854775792, 140737488355328.0])
def test_dcgm_blank_values_are_refused_even_where_the_range_admits_them(value: float) -> None:
    batch = {
        "protocol": 1,
        "source": "node:n",
        "seq": 1,
        "node": [{"ts": NOW, "net_rx_bytes_s": value}],
    }
    with pytest.raises(ProtocolError, match="DCGM blank"):
        validate_batch(batch, NOW)


def test_a_whole_float_in_an_integer_field_is_stored_as_an_integer() -> None:
    batch = {
        "protocol": 1,
        "source": "node:n",
        "seq": 1,
        "gpu": [{"ts": NOW, "gpu": 0, "pstate": 2.0}],
    }
    sample = validate_batch(batch, NOW).samples["gpu"][0]
    assert sample["pstate"] == 2 and type(sample["pstate"]) is int


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"events": [{"ts": NOW, "kind": "xid", "code": 2**64}]}, "events[0].code"),
        ({"events": [{"ts": NOW, "kind": "xid", "gpu": 40000}]}, "events[0].gpu"),
        ({"events": [{"ts": NOW, "kind": "note", "detail": "a\x00b"}]}, "events[0].detail"),
        ({"gpu_info": [{"gpu": -1}]}, "gpu_info[0].gpu"),
        ({"gpu_info": [{"gpu": 0, "uuid": "GPU\x00"}]}, "gpu_info"),
        ({"node_info": {"hostname": "n\x00"}}, "node_info"),
    ],
)
def test_values_a_database_would_refuse_are_refused_at_the_door(
    extra: dict[str, Any], field: str
) -> None:
    batch = {"protocol": 1, "source": "node:n", "seq": 1, **extra}
    with pytest.raises(ProtocolError) as refused:
        validate_batch(batch, NOW)
    assert refused.value.field == field and refused.value.code == 400
