"""A dcgm-exporter for bench/peer.py: one HTTP server serving every node's page, as a fleet
of dcgm-exporters would (one target per node of 8 GPUs), each scrape the node's GPUs'
readings of the trace stream (bench/peer_stream.py) for the second it is asked in.

    python -m bench.peer_exporter --origin E --port P --nodes N --out counts.json

GET /node/<i> serves node i's 8 GPUs: every field of bench/peer_stream.FIELDS with the
labels dcgm-exporter 4.x writes (gpu, UUID, pci_bus_id, device, modelName, Hostname,
DCGM_FI_DRIVER_VERSION). Runs until SIGTERM, then writes how many scrapes it served (and
so GPU samples) to --out. It is the load generator of this side, as the agents are of
Fleetwatch's, and its CPU is not Prometheus's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time

from bench.environment import install_uvloop
from bench.peer_stream import FIELDS, Stream
from bench.scale_agents import GPUS_PER_NODE

DRIVER = "580.105.08"


def node_name(i: int) -> str:
    return f"peer-node-{i:05d}"


def gpu_uuid(gpu: int) -> str:
    return f"GPU-{gpu:08x}-0000-4000-8000-{gpu:012x}"


class Pages:
    """Each node's page, its label sets rendered once; values filled in per scrape."""

    def __init__(self, stream: Stream, nodes: int) -> None:
        self.stream = stream
        self.heads = [f"# HELP {f.dcgm} {f.dcgm}.\n# TYPE {f.dcgm} gauge\n" for f in FIELDS]
        self.prefixes: list[list[list[str]]] = []  # [node][gpu][field]
        for i in range(nodes):
            node: list[list[str]] = []
            for g in range(GPUS_PER_NODE):
                labels = (
                    f'gpu="{g}",UUID="{gpu_uuid(i * GPUS_PER_NODE + g)}",'
                    f'pci_bus_id="00000000:{0x18 + g:02X}:00.0",device="nvidia{g}",'
                    f'modelName="NVIDIA H200",Hostname="{node_name(i)}",'
                    f'DCGM_FI_DRIVER_VERSION="{DRIVER}"'
                )
                node.append([f"{f.dcgm}{{{labels}}} " for f in FIELDS])
            self.prefixes.append(node)
        self.scrapes = 0

    def page(self, node: int, second: int) -> bytes:
        first = node * GPUS_PER_NODE
        values = [self.stream.dcgm(first + g, second) for g in range(GPUS_PER_NODE)]
        prefixes = self.prefixes[node]
        parts: list[str] = []
        for k, head in enumerate(self.heads):
            parts.append(head)
            for g in range(GPUS_PER_NODE):
                v = values[g][k]
                parts.append(f"{prefixes[g][k]}{int(v) if v.is_integer() else v}\n")
        self.scrapes += 1
        return "".join(parts).encode()


async def serve(pages: Pages, port: int, stop: asyncio.Event) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                try:
                    node = int(path.rsplit("/", 1)[1])
                    body = pages.page(node, int(time.time()))
                    status = b"200 OK"
                except (ValueError, IndexError):
                    body, status = b"no such node\n", b"404 Not Found"
                writer.write(
                    b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; version=0.0.4\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--origin", type=int, required=True, help="the stream's epoch second")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    install_uvloop()
    pages = Pages(Stream(args.origin), args.nodes)

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True)
        await serve(pages, args.port, stop)

    asyncio.run(run())
    with open(args.out, "w") as handle:
        json.dump({"scrapes": pages.scrapes, "gpu_samples": pages.scrapes * GPUS_PER_NODE}, handle)


if __name__ == "__main__":
    main()
