"""Agents for bench/peer.py: bench/scale_agents.py's fleet of WebSockets (one per node, 1 Hz,
each at its own phase, the lean client), each batch carrying its 8 GPUs' readings of the
trace stream (bench/peer_stream.py) for the second it is sent in, the same numbers the
exporter serves Prometheus. No node sample: Prometheus scrapes none either.

    python -m bench.peer_agents --origin E --url … --creds creds.json --window-start E \
        --window-end E --out F

Node number i of --creds (their order) carries GPUs 8i … 8i+7 of the stream.
"""

from __future__ import annotations

import json
import sys

import orjson

from bench import scale_agents
from bench.peer_stream import Stream
from bench.scale_agents import GPUS_PER_NODE


class TraceBatches:
    """scale_agents' batch renderer, with the trace's values instead of fixed ones."""

    def __init__(self, stream: Stream, sources: list[str]) -> None:
        self.stream = stream
        self.first_gpu = {source: i * GPUS_PER_NODE for i, source in enumerate(sources)}

    def render(self, source: str, seq: int, ts: float, tick: int) -> bytes:
        first, second = self.first_gpu[source], int(ts)
        gpus = [
            {"ts": ts, "gpu": g, **self.stream.fleetwatch(first + g, second)}
            for g in range(GPUS_PER_NODE)
        ]
        return orjson.dumps({"protocol": 1, "source": source, "seq": seq, "gpu": gpus})


def main() -> None:
    at = sys.argv.index("--origin")  # ours; the rest are scale_agents' own arguments
    origin = int(sys.argv[at + 1])
    del sys.argv[at : at + 2]
    with open(sys.argv[sys.argv.index("--creds") + 1]) as handle:
        sources = [c["source"] for c in json.load(handle)]
    scale_agents.BATCHES = TraceBatches(Stream(origin), sources)  # type: ignore[assignment]
    scale_agents.main()


if __name__ == "__main__":
    main()
