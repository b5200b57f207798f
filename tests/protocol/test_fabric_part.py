"""The `fabric` part on the wire: what the validator accepts and how it names a fault."""

from __future__ import annotations

import copy
import time
from typing import Any

import jsonschema
import pytest

from agents.protocol.fabric import MAX_PORTS_PER_NODE, saturated
from agents.protocol.schema import batch_schema
from agents.protocol.validate import ProtocolError, validate_batch

NOW = time.time()


def _ports() -> list[dict[str, Any]]:
    return [
        {
            "ts": NOW,
            "device": "mlx5_0",
            "port": 1,
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate": "400 Gb/sec (4X NDR)",
            "link_layer": "InfiniBand",
            "counters": {"link_downed": 1, "symbol_error": 14, "port_rcv_errors": 0},
        },
        {"ts": NOW, "device": "rxe0", "port": 1, "state": "ACTIVE", "counters": {}},
    ]


def _batch(fabric: Any, source: str = "node:gpu-a01-01") -> dict[str, Any]:
    return {"protocol": 1, "source": source, "seq": 1, "fabric": fabric}


def test_a_nodes_ports_are_accepted_and_kept_on_the_batch() -> None:
    batch = validate_batch(_batch(_ports()), NOW)
    assert [(p["device"], p["port"]) for p in batch.fabric] == [("mlx5_0", 1), ("rxe0", 1)]
    jsonschema.validate(_batch(_ports()), batch_schema())  # the schema agrees


def test_a_batch_without_the_part_has_no_ports() -> None:
    assert validate_batch({"protocol": 1, "source": "node:n", "seq": 1}, NOW).fabric == []


def _with(index: int, key: str, value: Any) -> list[dict[str, Any]]:
    ports = copy.deepcopy(_ports())
    if "." in key:
        outer, inner = key.split(".")
        ports[index][outer][inner] = value
    else:
        ports[index][key] = value
    return ports


@pytest.mark.parametrize(
    ("ports", "field", "words"),
    [
        (_with(0, "counters.link_downed", -1), "fabric[0].counters.link_downed", "integer"),
        (_with(0, "counters.link_downed", 1.5), "fabric[0].counters.link_downed", "integer"),
        (_with(0, "counters.port_xmit_data", 4), "fabric[0].counters.port_xmit_data", "unknown"),
        (_with(1, "device", "../etc"), "fabric[1].device", "device name"),
        (_with(1, "port", 256), "fabric[1].port", "0..255"),
        (_with(1, "port", True), "fabric[1].port", "port number"),
        (_with(0, "state", ""), "fabric[0].state", "text"),
        (_with(0, "rate", "x" * 65), "fabric[0].rate", "text"),
        (_with(0, "state", "ACT\x00IVE"), "fabric[0].state", "printable"),
        (_with(0, "speed", 400), "fabric[0].speed", "unknown field"),
        (_with(1, "counters", None), "fabric[1].counters", "required object"),
        (_with(1, "ts", NOW - 2 * 86_400), "fabric[1].ts", "port reading"),
        (_with(1, "device", "mlx5_0"), "fabric[1]", "same port"),
        ({"device": "mlx5_0"}, "fabric", "list"),
    ],
)
def test_a_bad_port_is_refused_naming_the_field(ports: Any, field: str, words: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        validate_batch(_batch(ports), NOW)
    assert refused.value.code == 400
    assert refused.value.field == field and words in refused.value.reason
    if field not in SCHEMA_CANNOT:
        with pytest.raises(jsonschema.ValidationError):  # the schema refuses it too
            jsonschema.validate(_batch(ports), batch_schema())


# A schema cannot compare two entries or a time with the server's clock.
SCHEMA_CANNOT = frozenset({"fabric[1]", "fabric[1].ts"})


def test_only_a_node_reports_ports() -> None:
    with pytest.raises(ProtocolError) as refused:
        validate_batch(_batch(_ports(), source="rack:lon1/A01"), NOW)
    assert refused.value.field == "fabric" and "node" in refused.value.reason


def test_a_node_with_too_many_ports_is_refused() -> None:
    many = [{"ts": NOW, "device": f"mlx5_{i}", "port": 1, "counters": {}} for i in range(65)]
    with pytest.raises(ProtocolError) as refused:
        validate_batch(_batch(many), NOW)
    assert f"at most {MAX_PORTS_PER_NODE}" in refused.value.reason


def test_an_error_counter_at_its_iba_maximum_is_saturated() -> None:
    assert saturated("link_downed", 255) and not saturated("link_downed", 254)
    assert saturated("symbol_error", 65535) and saturated("local_link_integrity_errors", 15)
