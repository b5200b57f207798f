"""Small builders shared by the agent tests."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agents.collectors.base import Reading
from agents.outbox import Outbox
from agents.spool import SpoolSettings
from agents.uplink import UplinkSettings
from tests.support.stub_server import StubBackend


def node_reading(gpu_count: int = 2, ts: float | None = None) -> Reading:
    ts = ts if ts is not None else time.time()
    reading = Reading()
    for index in range(gpu_count):
        reading.add("gpu", {"ts": ts, "gpu": index, "power_w": 80.0 + index, "temp_gpu_c": 38})
    reading.add("node", {"ts": ts, "cpu_pct": 3.5})
    return reading


def make_outbox(
    backend: StubBackend,
    spool_dir: Path,
    source: str = "node:gpu-a01-01",
    token: str | None = None,
    spool: SpoolSettings | None = None,
    **uplink: object,
) -> Outbox:
    settings = UplinkSettings(
        server=backend.url,
        token=token if token is not None else backend.enroll(source),
        source=source,
        backoff_base_s=0.05,
        backoff_cap_s=0.2,
        open_timeout_s=2.0,
        **uplink,  # type: ignore[arg-type]
    )
    return Outbox(source, spool_dir, settings, spool or SpoolSettings(fsync=False))


def agent_toml(settings: dict[str, Any], targets: list[dict[str, Any]]) -> str:
    """A `fleet-agent` TOML file: top-level settings, then one [[facility.targets]] each."""
    lines = [f"{key} = {_toml_value(value)}" for key, value in settings.items()]
    for table in targets:
        lines += ["", "[[facility.targets]]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    # json.dumps writes strings and numbers the way TOML reads them.
    return json.dumps(str(value) if isinstance(value, Path) else value)
