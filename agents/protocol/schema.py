"""Generate the protocol's JSON Schema from the metric catalogue.

    python -m agents.protocol.schema > agents/protocol/schema-v1.json

The schema states for people and other tools what `validate.py` enforces on
the hot path; a test keeps the file current and the two in agreement.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agents.protocol import (
    CADENCE_FIELDS_KEY,
    CADENCE_KEYS,
    MAX_BATCH_BYTES,
    MAX_EVENTS_PER_BATCH,
    MAX_FUTURE_S,
    MAX_GPUS_PER_NODE,
    MAX_INTERVAL_S,
    MAX_PAST_S,
    MIN_INTERVAL_S,
    PROTOCOL_VERSION,
    SOURCE_KINDS,
)
from agents.protocol.fabric import (
    COUNTERS,
    DEVICE_NAME,
    MAX_COUNTER,
    MAX_FABRIC_ENTRIES,
    MAX_PORT,
    TEXT_KEYS,
)
from agents.protocol.fabric import MAX_TEXT as MAX_PORT_TEXT
from agents.protocol.memory import (
    MAX_COUNT,
    MEMORY_ERROR_KEYS,
    MEMORY_ERRORS_KEY,
    NOT_SUPPORTED,
    RESET_EVENTS,
)
from agents.protocol.metrics import ENTITY_KEYS, METRICS, SAMPLE_KINDS
from agents.protocol.workloads import (
    MAX_MEMORY_MIB,
    MAX_PID,
    MAX_PROCESSES_PER_GPU,
    MAX_TEXT,
    MAX_UID,
    MAX_WORKLOAD_ENTRIES,
    OWNER_TEXT,
)

SCHEMA_ID = "https://fleetwatch.invalid/schema/agent-batch-v1.json"
# JSON Schema cannot compare with the server's clock, so the window is stated in words.
TS_HELP = (
    f"Unix time (s); at most {MAX_FUTURE_S:g} s ahead of the server and "
    f"{MAX_PAST_S / 3600:g} h behind it"
)


def _metric(lo: float, hi: float, integer: bool, help: str) -> dict[str, Any]:
    return {
        "type": "integer" if integer else "number",
        "minimum": lo,
        "maximum": hi,
        "description": help,
    }


def _entity_key(key: str) -> dict[str, Any]:
    if key == "gpu":
        return {"type": "integer", "minimum": 0, "maximum": 1023, "description": "GPU index"}
    return {"type": "string", "minLength": 1, "maxLength": 100, "description": f"{key} name"}


def sample_schema(kind: str) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "ts": {
            "type": "number",
            "minimum": 1_000_000_000,
            "description": TS_HELP,
        }
    }
    for key in ENTITY_KEYS[kind]:
        properties[key] = _entity_key(key)
    for m in METRICS[kind]:
        properties[m.name] = _metric(m.lo, m.hi, m.integer, f"{m.help} [{m.kind}]")
    return {
        "type": "object",
        "properties": properties,
        "required": ["ts", *ENTITY_KEYS[kind]],
        "additionalProperties": False,
    }


def _seconds(help: str) -> dict[str, Any]:
    return {
        "type": "number",
        "minimum": MIN_INTERVAL_S,
        "maximum": MAX_INTERVAL_S,
        "description": help,
    }


def cadence_schema() -> dict[str, Any]:
    names = sorted({m.name for metrics in METRICS.values() for m in metrics})
    return {
        "type": "object",
        "description": "the source's own intervals; the server judges silence in batch"
        " intervals (batch_s and each of fields_s not shorter than sample_s, which a schema"
        " cannot state)",
        "properties": {
            "sample_s": _seconds("seconds between samples"),
            "batch_s": _seconds("seconds between batches"),
            CADENCE_FIELDS_KEY: {
                "type": "object",
                "description": "fields refreshed less often than every sample: seconds"
                " between their refreshes",
                "propertyNames": {"enum": names},
                "additionalProperties": _seconds("seconds between this field's refreshes"),
            },
        },
        "required": list(CADENCE_KEYS),
        "additionalProperties": False,
    }


_TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT, "pattern": "^[^\\u0000]*$"}


def owner_schema() -> dict[str, Any]:
    """Who a process or an allocation belongs to: one shape per `kind`."""
    shapes = []
    for kind, (required, optional) in OWNER_TEXT.items():
        properties: dict[str, Any] = {"kind": {"const": kind}}
        properties.update({name: _TEXT for name in sorted(required | optional)})
        needed = ["kind", *sorted(required)]
        if kind == "user":
            properties["uid"] = {"type": "integer", "minimum": 0, "maximum": MAX_UID}
            needed.append("uid")
        shapes.append(
            {
                "type": "object",
                "properties": properties,
                "required": needed,
                "additionalProperties": False,
            }
        )
    return {"oneOf": shapes}


def workload_schema() -> dict[str, Any]:
    """One GPU (or MIG device) of a node: what the scheduler gave, and who runs on it."""
    process = {
        "type": "object",
        "properties": {
            "pid": {"type": "integer", "minimum": 1, "maximum": MAX_PID, "description": "host PID"},
            "memory_mib": {"type": "number", "minimum": 0, "maximum": MAX_MEMORY_MIB},
            "sm_pct": {
                "type": ["number", "null"],
                "minimum": 0,
                "maximum": 100,
                "description": "mean SM % since the last snapshot; null where NVML has none (MIG)",
            },
            "started": {
                "type": "number",
                "minimum": 0,
                "description": "when the process started, Unix time (s); at most the entry's ts",
            },
            "owner": {"$ref": "#/$defs/owner"},
        },
        "required": ["pid", "sm_pct", "owner"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "ts": {"type": "number", "minimum": 1_000_000_000, "description": TS_HELP},
            "gpu": {"type": "integer", "minimum": 0, "maximum": 1023},
            "mig": {**_TEXT, "description": "the MIG device's UUID"},
            "allocation": {
                "oneOf": [{"type": "null"}, {"$ref": "#/$defs/owner"}],
                "description": "what the scheduler gave (pod-resources, Slurm GRES); null: none",
            },
            "processes": {"type": "array", "maxItems": MAX_PROCESSES_PER_GPU, "items": process},
        },
        "required": ["ts", "gpu", "allocation", "processes"],
        "additionalProperties": False,
    }


def fabric_schema() -> dict[str, Any]:
    """One InfiniBand/RoCE port of a node as read at `ts`: the kernel's words and the error
    counters it supports (a counter left out is unsupported, never 0)."""
    text = {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_PORT_TEXT,
        "pattern": "^[^\\u0000-\\u001f\\u007f]*$",  # printable
    }
    words = {
        "state": "IBA port state as sysfs names it (ACTIVE, DOWN, INIT, ARMED, …)",
        "phys_state": "physical state (LinkUp, Polling, Disabled, …)",
        "rate": "sysfs `rate`, e.g. 400 Gb/sec (4X NDR)",
        "link_layer": "InfiniBand, or Ethernet (RoCE)",
    }
    counter = {"type": "integer", "minimum": 0, "maximum": MAX_COUNTER}
    return {
        "type": "object",
        "properties": {
            "ts": {"type": "number", "minimum": 1_000_000_000, "description": TS_HELP},
            "device": {"type": "string", "pattern": DEVICE_NAME.pattern},
            "port": {"type": "integer", "minimum": 0, "maximum": MAX_PORT},
            **{key: {**text, "description": words[key]} for key in TEXT_KEYS},
            "counters": {
                "type": "object",
                "properties": {name: counter for name in COUNTERS},
                "additionalProperties": False,
            },
        },
        "required": ["ts", "device", "port", "counters"],
        "additionalProperties": False,
    }


def memory_errors_schema() -> dict[str, Any]:
    """`gpu_info[].memory_errors`: each key a count or "not_supported" (protocol/memory.py)."""
    count = {
        "oneOf": [
            {"type": "integer", "minimum": 0, "maximum": MAX_COUNT},
            {"const": NOT_SUPPORTED},
        ]
    }
    return {
        "type": "object",
        "description": "lifetime ECC and page-retirement counts, re-sent when one changes",
        "properties": {
            key: {**count, "description": help} for key, help in MEMORY_ERROR_KEYS.items()
        },
        "additionalProperties": False,
    }


def batch_schema() -> dict[str, Any]:
    properties: dict[str, Any] = {
        "protocol": {"const": PROTOCOL_VERSION},
        "source": {
            "type": "string",
            "pattern": f"^({'|'.join(SOURCE_KINDS)}):.+$",
            "description": "node:<hostname>, rack:<site>/<rack>, loop:<site>/<loop>, site:<site>",
        },
        "seq": {"type": "integer", "minimum": 0},
        "sent_at": {
            "type": "number",
            "description": "Unix time (s) the batch was built; informational",
        },
        "cadence": cadence_schema(),
        "gpu_info": {
            "type": "array",
            "maxItems": MAX_GPUS_PER_NODE,
            "items": {
                "type": "object",
                "properties": {
                    "gpu": {"type": "integer", "minimum": 0, "maximum": 1023},
                    MEMORY_ERRORS_KEY: memory_errors_schema(),
                },
                "required": ["gpu"],
            },
        },
        "node_info": {"type": "object"},
        "agent": {"type": "object"},
        "events": {
            "type": "array",
            "maxItems": MAX_EVENTS_PER_BATCH,
            "items": {
                "type": "object",
                "properties": {
                    "ts": {"type": "number", "minimum": 1_000_000_000, "description": TS_HELP},
                    "kind": {
                        "enum": [
                            "xid",
                            "ecc_sbe",
                            "ecc_dbe",
                            "gpu_lost",
                            *RESET_EVENTS,
                            "collector_error",
                            "note",
                        ]
                    },
                    "gpu": {"type": "integer", "minimum": 0, "maximum": 1023},
                    "code": {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
                    "detail": {"type": "string", "pattern": "^[^\\u0000]*$"},
                },
                "required": ["ts", "kind"],
            },
        },
    }
    for kind in SAMPLE_KINDS:
        properties[kind] = {"type": "array", "items": {"$ref": f"#/$defs/{kind}"}}
    properties["workloads"] = {
        "type": "array",
        "maxItems": MAX_WORKLOAD_ENTRIES,
        "description": "node sources only: who runs on each GPU, a full snapshot per GPU",
        "items": {"$ref": "#/$defs/workload"},
    }
    properties["fabric"] = {
        "type": "array",
        "maxItems": MAX_FABRIC_ENTRIES,
        "description": "node sources only: each InfiniBand/RoCE port's state and error counters",
        "items": {"$ref": "#/$defs/fabric_port"},
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"Fleetwatch agent batch, protocol v{PROTOCOL_VERSION}",
        "description": f"One batch from one source; at most {MAX_BATCH_BYTES} bytes of JSON.",
        "type": "object",
        "properties": properties,
        "required": ["protocol", "source", "seq"],
        "additionalProperties": False,
        "$defs": {
            **{kind: sample_schema(kind) for kind in SAMPLE_KINDS},
            "owner": owner_schema(),
            "workload": workload_schema(),
            "fabric_port": fabric_schema(),
        },
    }


def render() -> str:
    return json.dumps(batch_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
