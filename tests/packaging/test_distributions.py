"""The two distributions, as a team deploying them would install them (issue 19).

`make dist` builds `fleetwatch-agent` and `fleetwatch` into dist/; each wheel goes into a
fresh virtual environment outside the checkout. The agent's holds no Django and runs
`fleet-agent check` against a fake NVML this test supplies; the server's migrates, serves
the sign-in page and a static file from the wheel alone.

Installing the server's dependencies needs the package index: where it cannot be reached
the server's half is skipped, except under CI (REQUIRE_SERVICES=1), where it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import needs
from tests.support.server import ROOT, free_port
from tests.support.waiting import wait_until

FAKE_PYNVML = ROOT / "tests" / "support" / "fake_pynvml"
# What installing the agent brings, itself included (docs/agent.md quotes it).
AGENT_CLOSURE = {"fleetwatch-agent", "websockets", "nvidia-ml-py", "orjson"}
VENV_TOOLS = {"pip", "setuptools", "wheel"}
INDEX_TROUBLE = ("Could not find a version", "NewConnectionError", "Network is unreachable")

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def dist_dir() -> Path:
    subprocess.run(["make", "-s", "dist"], cwd=ROOT, check=True, capture_output=True)
    return ROOT / "dist"


def wheel(dist_dir: Path, name: str) -> Path:
    (found,) = dist_dir.glob(f"{name}-*-py3-none-any.whl")
    return found


def fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin"


def pip_install(bin_dir: Path, *wheels: Path) -> None:
    done = subprocess.run(
        [str(bin_dir / "pip"), "install", "-q", "--disable-pip-version-check", *map(str, wheels)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        index_trouble = any(sign in done.stderr for sign in INDEX_TROUBLE)
        if index_trouble and not needs.required(needs.SERVICES):
            pytest.skip(f"the package index cannot be reached: {done.stderr[-300:]}")
        raise AssertionError(f"pip install failed:\n{done.stderr}")


def installed(bin_dir: Path) -> set[str]:
    listing = subprocess.run(
        [str(bin_dir / "pip"), "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {row["name"].lower() for row in json.loads(listing.stdout)} - VENV_TOOLS


def outside_checkout_env(**extra: str) -> dict[str, str]:
    """The environment without anything pointing back into the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return {**env, **extra}


@pytest.fixture(scope="module")
def agent_bin(dist_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bin_dir = fresh_venv(tmp_path_factory.mktemp("agent-venv"))
    pip_install(bin_dir, wheel(dist_dir, "fleetwatch_agent"))
    return bin_dir


def test_the_agent_installs_without_django_or_the_server(agent_bin: Path) -> None:
    assert installed(agent_bin) == AGENT_CLOSURE
    probe = subprocess.run(
        [str(agent_bin / "python"), "-c", "import fleet"],
        capture_output=True,
        text=True,
        cwd=agent_bin.parent,
        env=outside_checkout_env(),
    )
    assert "No module named 'fleet'" in probe.stderr


def test_fleet_agent_help_runs_from_the_agent_wheel(agent_bin: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(agent_bin / "fleet-agent"), "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=outside_checkout_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "enroll" in done.stdout and "check" in done.stdout


def test_fleet_agent_check_reads_a_gpu_through_the_nvml_it_finds(
    agent_bin: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(agent_bin / "fleet-agent"), "check", "--collectors", "gpu"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=outside_checkout_env(PYTHONPATH=str(FAKE_PYNVML)),
        timeout=60,
    )
    assert "[gpu] ok" in done.stdout, done.stdout + done.stderr
    assert "Fake H200 (test)" in done.stdout
    assert "gpu 0: reads power_w, temp_gpu_c" in done.stdout


def test_simulate_on_a_node_says_the_simulator_comes_with_the_server(
    agent_bin: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(agent_bin / "fleet-agent"), "simulate", "--server", "http://x", "--enroll-token", "t"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=outside_checkout_env(),
    )
    assert done.returncode == 2
    assert "ships with the server's package" in done.stderr


@pytest.fixture(scope="module")
def server_bin(dist_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bin_dir = fresh_venv(tmp_path_factory.mktemp("server-venv"))
    pip_install(bin_dir, wheel(dist_dir, "fleetwatch_agent"), wheel(dist_dir, "fleetwatch"))
    return bin_dir


@pytest.fixture()
def server_env(tmp_path: Path) -> dict[str, str]:
    return outside_checkout_env(
        SECRET_KEY="wheel-test-secret",
        ALLOWED_HOSTS="127.0.0.1",
        FLEETWATCH_PLAIN_HTTP="1",
        FLEETWATCH_VAR_DIR=str(tmp_path / "var"),
    )


@pytest.fixture()
def served(server_bin: Path, server_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    migrate = subprocess.run(
        [str(server_bin / "fleetwatch"), "manage", "migrate", "-v0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=server_env,
    )
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(server_bin / "fleetwatch"), "serve", "--port", str(port)],
        cwd=tmp_path,
        env=server_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        log_path = tmp_path / "serve.log"
        wait_until(
            lambda: answering(url + "/healthz", proc, log_path),
            60,
            f"fleetwatch serve answering at {url}",
            detail=lambda: log_path.read_text()[-2000:],
        )
        yield url
    finally:
        proc.terminate()
        proc.wait(15)


def answering(url: str, proc: subprocess.Popen[bytes], log: Path) -> bool:
    assert proc.poll() is None, log.read_text()[-2000:]
    try:
        urllib.request.urlopen(url, timeout=2)
    except urllib.error.HTTPError:
        return True  # any answer: the server is up
    except OSError:
        return False
    return True


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_the_server_runs_from_its_wheel_outside_the_checkout(server_bin: Path, served: str) -> None:
    status, page = get(served + "/admin/login/")
    assert status == 200 and b"Sign in" in page
    status, css = get(served + "/static/dashboard/fleet.css")
    assert status == 200 and len(css) > 100
    where = subprocess.run(
        [str(server_bin / "python"), "-c", "import fleetwatch; print(fleetwatch.__file__)"],
        capture_output=True,
        text=True,
        cwd=server_bin.parent,
        env=outside_checkout_env(SECRET_KEY="x"),
    )
    assert where.stdout.startswith(str(server_bin.parent)), where.stdout + where.stderr


def test_the_servers_install_includes_the_simulator_for_fleet_agent(server_bin: Path) -> None:
    done = subprocess.run(
        [str(server_bin / "fleet-agent"), "simulate", "--help"],
        capture_output=True,
        text=True,
        env=outside_checkout_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "--fault" in done.stdout
