from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

from tests.support.stub_server import ENROLL_TOKEN, StubBackend


def _fleet_agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agents.cli", *args], capture_output=True, text=True, timeout=30
    )


def test_enrol_stores_the_node_token_readable_only_by_its_owner(
    backend: StubBackend, tmp_path: Path
) -> None:
    token_file = tmp_path / "etc" / "token"
    done = _fleet_agent(
        "enroll",
        "--server",
        backend.url,
        "--enroll-token",
        ENROLL_TOKEN,
        "--source",
        "node:gpu-a01-01",
        "--token-file",
        str(token_file),
    )
    assert done.returncode == 0, done.stderr
    token = token_file.read_text().strip()
    assert backend.tokens[token] == "node:gpu-a01-01"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600


def test_enrol_with_a_bad_token_says_so_and_writes_nothing(
    backend: StubBackend, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    done = _fleet_agent(
        "enroll",
        "--server",
        backend.url,
        "--enroll-token",
        "fwe_wrong",
        "--source",
        "node:gpu-a01-01",
        "--token-file",
        str(token_file),
    )
    assert done.returncode == 1
    assert "enrolment token was refused" in done.stderr
    assert "Traceback" not in done.stderr
    assert not token_file.exists()


def test_enrol_of_a_node_missing_from_the_inventory_names_the_fix(
    backend: StubBackend, tmp_path: Path
) -> None:
    done = _fleet_agent(
        "enroll",
        "--server",
        backend.url,
        "--enroll-token",
        ENROLL_TOKEN,
        "--source",
        "node:not-racked",
        "--token-file",
        str(tmp_path / "token"),
    )
    assert done.returncode == 1
    assert "not in the site's inventory" in done.stderr


def test_enrol_against_an_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    done = _fleet_agent(
        "enroll",
        "--server",
        "http://127.0.0.1:9",
        "--enroll-token",
        ENROLL_TOKEN,
        "--token-file",
        str(tmp_path / "token"),
    )
    assert done.returncode == 1
    assert "cannot reach" in done.stderr


def test_version_is_printed() -> None:
    done = _fleet_agent("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("fleet-agent ")
