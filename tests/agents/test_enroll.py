from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

from tests.support.stub_server import ENROLL_TOKEN, StubBackend


def _enroll(
    server: str, token_file: Path, enroll_token: str = ENROLL_TOKEN, source: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`fleet-agent enroll` against `server` (the source defaults to node:<hostname>)."""
    named = ("--source", source) if source else ()
    return _fleet_agent(
        *("enroll", "--server", server, "--enroll-token", enroll_token),
        *named,
        *("--token-file", str(token_file)),
    )


def _fleet_agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agents.cli", *args], capture_output=True, text=True, timeout=30
    )


def test_enrol_stores_the_node_token_readable_only_by_its_owner(
    backend: StubBackend, tmp_path: Path
) -> None:
    token_file = tmp_path / "etc" / "token"
    done = _enroll(backend.url, token_file, source="node:gpu-a01-01")
    assert done.returncode == 0, done.stderr
    token = token_file.read_text().strip()
    assert backend.tokens[token] == "node:gpu-a01-01"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600


def test_enrol_with_a_bad_token_says_so_and_writes_nothing(
    backend: StubBackend, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    done = _enroll(backend.url, token_file, "fwe_wrong", source="node:gpu-a01-01")
    assert done.returncode == 1
    assert "enrolment token was refused" in done.stderr
    assert "Traceback" not in done.stderr
    assert not token_file.exists()


def test_enrol_of_a_node_missing_from_the_inventory_names_the_fix(
    backend: StubBackend, tmp_path: Path
) -> None:
    done = _enroll(backend.url, tmp_path / "token", source="node:not-racked")
    assert done.returncode == 1
    assert "not in the site's inventory" in done.stderr


def test_enrol_against_an_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    done = _enroll("http://127.0.0.1:9", tmp_path / "token")
    assert done.returncode == 1
    assert "cannot reach" in done.stderr


def test_version_is_printed() -> None:
    done = _fleet_agent("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("fleet-agent ")
