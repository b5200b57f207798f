"""Fleetwatch agent protocol v1: the wire contract between agents and the backend.

Pure Python (no Django): the agent, the simulator and the backend's ingest all
import it. `docs/protocol.md` explains it; `schema-v1.json` is its JSON Schema.
"""

from __future__ import annotations

from typing import Any

PROTOCOL_VERSION = 1

WS_PATH = "/ws/ingest/v1"
HTTP_INGEST_PATH = "/api/v1/ingest"
HTTP_ENROLL_PATH = "/api/v1/enroll"
HTTP_INVENTORY_PATH = "/api/v1/inventory"

# A batch larger than this is refused with 413 (WebSocket: an error frame).
MAX_BATCH_BYTES = 1 << 20
# Samples stamped further ahead of the server clock than this are refused (400).
MAX_FUTURE_S = 300.0
# Samples older than this are refused (400). A day, so that the spool backlog of an
# agent cut off for a day-long outage still goes in; anything older is a broken clock.
MAX_PAST_S = 86_400.0
# What one node may grow and one batch may carry (docs/protocol.md, "Limits"); past any of
# them the batch is refused (400) naming the limit.
MAX_GPUS_PER_NODE = 64  # GPU rows a node may have, inventory's and agent-described together
MAX_EVENTS_PER_BATCH = 1000
MAX_INFO_BYTES = 64 * 1024  # node_info, agent, and gpu_info (all entries), each as JSON
MAX_INFO_DEPTH = 16  # nesting of objects and lists in those blocks

# The cadence a source declares in every batch (`cadence`: docs/protocol.md): how often it
# samples and how often it sends a batch, in seconds. The server judges the source silent in
# its own batch intervals; bounds keep a typo (0, or a day) from blinding that judgement.
# 10 ms is faster than any agent samples (tests and benches run agents at 50 ms).
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 3600.0
CADENCE_KEYS = ("sample_s", "batch_s")
CADENCE_FIELDS_KEY = "fields_s"  # optional: fields refreshed less often than every sample


def cadence(
    sample_s: float, batch_s: float | None = None, fields_s: dict[str, float] | None = None
) -> dict[str, Any]:
    """The batch's `cadence` block: sampling every `sample_s`, a batch every `batch_s`
    (default: one batch per sample), and `fields_s`, the fields that come less often than
    every sample (a slow read every N ticks) with their own interval."""
    block: dict[str, Any] = {
        "sample_s": float(sample_s),
        "batch_s": float(sample_s if batch_s is None else batch_s),
    }
    if fields_s:
        block[CADENCE_FIELDS_KEY] = {name: float(s) for name, s in sorted(fields_s.items())}
    return block


# WebSocket close codes (4000 + the HTTP status they mirror).
CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_PROTOCOL = 4400

SOURCE_KINDS = ("node", "rack", "loop", "site")


def parse_source(source: str) -> tuple[str, str]:
    """Split `kind:name` (e.g. `node:gpu-a01-03`, `rack:lon1/A01`)."""
    kind, sep, name = source.partition(":")
    if not sep or kind not in SOURCE_KINDS or not name:
        raise ValueError(f"source must be one of {SOURCE_KINDS} as 'kind:name', got {source!r}")
    return kind, name
