"""Fake-NVML scenarios on the real H200 capture, with a clock the test moves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from agents.collectors.gpu import GpuCollector
from agents.nvml.wrapper import Nvml
from fleetsim.fake_nvml import FakeNvml

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "nvml" / "h200"
IDLE_T = 5.0  # seconds into the trace: idle
LOAD_T = 40.0  # under the matmul load, held at the power cap


class TraceClock:
    def __init__(self, t: float = IDLE_T) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def fake_gpus(gpus: int = 2, clock: TraceClock | None = None, **scenario: Any) -> FakeNvml:
    return FakeNvml(CAPTURE, gpus=gpus, clock=clock or TraceClock(), **scenario)


def collector(fake: FakeNvml, **settings: Any) -> GpuCollector:
    gpu = GpuCollector(Nvml(fake), **settings)
    gpu.setup()
    return gpu


def run_fake_gpu_agent(
    server_url: str, token_file: Path, source: str, spool: Path, *extra: str
) -> subprocess.Popen[str]:
    """`fleet-agent run` from this checkout reading two H200s through the capture-driven fake
    NVML every 0.1 s (GPU collector only, reconnect backoff capped at 0.3 s); `extra` flags
    appended. Output piped as text."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "agents.cli", "run"),
            *("--server", server_url, "--token-file", str(token_file), "--source", source),
            *("--spool-dir", str(spool), "--interval-s", "0.1"),
            *("--nvml", f"fake:{CAPTURE}::2", "--collectors", "gpu", "--backoff-cap-s", "0.3"),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
