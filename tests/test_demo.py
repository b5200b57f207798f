"""`make demo`: it starts everything, data flows, Ctrl-C stops it all, it can run again."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.support.server import ROOT, free_port


def start_demo(var_dir: Path, port: int) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        {
            "FLEETWATCH_VAR_DIR": str(var_dir),
            "FLEETWATCH_PORT": str(port),
            "FLEETWATCH_DEMO_NODES": "8",
        }
    )
    env.pop("FLEETWATCH_TESTING", None)  # the demo must run on its own settings
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetwatch.demo"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    banner = ""
    deadline = time.monotonic() + 90
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        banner += line
        if "Ctrl-C stops everything" in line:
            return proc, banner
    proc.kill()
    raise AssertionError(f"the demo did not start:\n{banner}")


def gpu_rows(var_dir: Path) -> int:
    with sqlite3.connect(var_dir / "fleetwatch.sqlite3") as conn:
        return int(conn.execute("SELECT count(*) FROM fw_gpu_raw").fetchone()[0])


def processes_mentioning(text: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", text], capture_output=True, text=True, check=False)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(60)


def test_demo_runs_everything_streams_data_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    port = free_port()
    proc, banner = start_demo(var_dir, port)
    try:
        assert f"http://127.0.0.1:{port}/" in banner
        assert "admin / " in banner and "fwe_demo_" in banner
        deadline = time.monotonic() + 30
        while gpu_rows(var_dir) == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert gpu_rows(var_dir) > 0
        assert len(processes_mentioning(str(var_dir))) >= 2  # beat and simulator name var/
    finally:
        code = stop(proc)
    assert code == 0
    assert processes_mentioning(str(var_dir)) == []

    # Safe to run twice: same login, same token, the data kept.
    kept = gpu_rows(var_dir)
    again, second_banner = start_demo(var_dir, port)
    try:
        login = [line for line in banner.splitlines() if "admin / " in line]
        assert login and login[0] in second_banner
        assert gpu_rows(var_dir) >= kept
    finally:
        assert stop(again) == 0
