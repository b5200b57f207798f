"""`fleet-agent run` as a real process: SIGTERM, spool, restart."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from agents.enroll import write_token
from tests.support.nvml_scenarios import CAPTURE, run_fake_gpu_agent
from tests.support.stub_server import StubBackend
from tests.support.waiting import wait_until

SOURCE = "node:gpu-a01-01"


def _start_agent(backend: StubBackend, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    token_file = tmp_path / "token"
    if not token_file.exists():
        write_token(token_file, backend.enroll(SOURCE))
    return run_fake_gpu_agent(backend.url, token_file, SOURCE, tmp_path / "spool", *extra)


def _spooled(tmp_path: Path) -> int:
    return len([p for p in (tmp_path / "spool").glob("*.json") if p.stem.isdigit()])


def _stopped_line(stderr: str) -> dict[str, Any]:
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return next(line for line in lines if line["msg"] == "agent stopped")


def test_sigterm_delivers_the_backlog_then_exits_cleanly(
    backend: StubBackend, tmp_path: Path
) -> None:
    agent = _start_agent(backend, tmp_path, "--flush-timeout-s", "10")
    wait_until(lambda: len(backend.store.batches) >= 2, 15, "two batches at the backend")
    backend.stop()
    wait_until(lambda: _spooled(tmp_path) >= 5, 15, "five batches spooled")
    backend.start()
    agent.send_signal(signal.SIGTERM)
    _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 0, stderr
    assert _spooled(tmp_path) == 0
    stopped = _stopped_line(stderr)
    assert stopped["delivered_all"] is True
    seqs = {seq for source, seq in backend.store.seqs if source == SOURCE}
    assert len(seqs) == stopped["ticks"]  # every tick's batch arrived, none lost


def test_sigterm_with_the_server_down_keeps_the_spool_for_next_time(
    backend: StubBackend, tmp_path: Path
) -> None:
    backend.stop()
    agent = _start_agent(backend, tmp_path, "--flush-timeout-s", "0.5")
    wait_until(lambda: _spooled(tmp_path) >= 3, 15, "three batches spooled")
    agent.send_signal(signal.SIGTERM)
    _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 0, stderr
    stopped = _stopped_line(stderr)
    assert _spooled(tmp_path) == stopped["ticks"]
    backend.start()
    restarted = _start_agent(backend, tmp_path)  # the next start sends it all
    try:
        wait_until(
            lambda: (
                len({s for s, _ in backend.store.seqs}) == 1
                and len(backend.store.seqs) >= int(stopped["ticks"])
            ),
            15,
            "every tick of the stopped agent delivered by the restarted one",
        )
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.communicate(timeout=30)
    assert restarted.returncode == 0


def test_run_without_a_token_says_how_to_get_one(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agents.cli",
            "run",
            "--server",
            "http://127.0.0.1:9",
            "--token-file",
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "fleet-agent enroll" in done.stdout + done.stderr


def test_run_with_a_revoked_token_exits_with_code_3(backend: StubBackend, tmp_path: Path) -> None:
    write_token(tmp_path / "token", "fwn_revoked")
    agent = _start_agent(backend, tmp_path)
    _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 3
    assert "server rejected this agent" in stderr


def _check(backend: StubBackend, tmp_path: Path, token: str) -> subprocess.CompletedProcess[str]:
    write_token(tmp_path / "token", token)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "agents.cli",
            "check",
            "--server",
            backend.url,
            "--token-file",
            str(tmp_path / "token"),
            "--nvml",
            f"fake:{CAPTURE}::2",
            "--collectors",
            "gpu,host,power,tuning",
            "--ipmitool",
            str(tmp_path / "no-ipmitool"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_reports_what_each_collector_sees_and_the_connection(
    backend: StubBackend, tmp_path: Path
) -> None:
    done = _check(backend, tmp_path, backend.enroll(SOURCE))
    assert done.returncode == 0, done.stdout + done.stderr
    report = done.stdout
    assert "[gpu] ok" in report and "gpu 1 limits" in report and '"slowdown_c": 89' in report
    assert '"tlimit_slowdown_c": -2' in report
    assert "not available here (left out): nvlink_up" in report  # the H200 VM has no NVLink
    assert "[host] ok" in report and "[tuning] ok" in report
    assert "[ipmi] not used here" in report
    assert "reachable, token accepted" in report


def test_check_says_when_the_server_refuses_the_token(backend: StubBackend, tmp_path: Path) -> None:
    done = _check(backend, tmp_path, "fwn_revoked")
    assert done.returncode == 1
    assert "refuses the token: run `fleet-agent enroll`" in done.stdout
