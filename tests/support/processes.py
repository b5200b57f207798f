"""Ending a child process the polite way first, shared by the test helpers and the benches."""

from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace_s` seconds; returns once
    it has exited either way (no zombie, its exit status collected)."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
