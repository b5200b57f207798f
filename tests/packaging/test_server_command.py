"""`fleetwatch serve|worker|beat|manage` and the systemd units that run them
(docs/examples/systemd/): every unit's command is one the CLI accepts, the workers consume
every queue, and the server always runs with its connection limits."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import pytest

from fleetwatch.celery import QUEUES
from fleetwatch.cli import COMMANDS, _parser, all_queues
from fleetwatch.demo import celery_workers
from fleetwatch.serve import UVICORN_LIMITS

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "docs" / "examples" / "systemd"
SERVER_BIN = "/opt/fleetwatch/venv/bin/fleetwatch"


INSTANCE = "8001"  # what systemd puts for %i in `fleetwatch-web@8001`


def exec_start(unit: Path) -> list[str]:
    """ExecStart as systemd runs it: `%i` the instance, `%%` a literal percent sign."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string(unit.read_text())
    line = re.sub(
        r"%([%i])", lambda m: INSTANCE if m[1] == "i" else "%", parser["Service"]["ExecStart"]
    )
    return shlex.split(line)


def server_units() -> list[Path]:
    return sorted(UNITS.glob("fleetwatch-*.service"))


def unit_command(unit: Path) -> list[str]:
    """The arguments the CLI turns into uvicorn's or Celery's, from the unit's ExecStart."""
    argv = exec_start(unit)
    assert argv[0] == SERVER_BIN, unit.name
    args, unknown = _parser().parse_known_args(argv[1:])
    assert unknown == [], f"{unit.name}: options fleetwatch does not know: {unknown}"
    return COMMANDS[args.command](args)


def test_the_server_always_runs_with_its_connection_limits() -> None:
    args = _parser().parse_args(["serve", "--port", "8001"])
    command = COMMANDS["serve"](args)
    assert " ".join(UVICORN_LIMITS) in " ".join(command)
    assert command[command.index("--host") + 1] == "127.0.0.1"  # behind the proxy by default
    assert command[command.index("--port") + 1] == "8001"


def test_a_worker_with_no_queues_named_consumes_every_queue() -> None:
    command = COMMANDS["worker"](_parser().parse_args(["worker"]))
    assert set(command[command.index("-Q") + 1].split(",")) == set(QUEUES) == set(all_queues())


@pytest.mark.parametrize("unit", server_units(), ids=lambda unit: unit.name)
def test_every_documented_unit_runs_a_command_fleetwatch_accepts(unit: Path) -> None:
    assert unit_command(unit)[:2] in (["-m", "uvicorn"], ["-m", "celery"])


def test_the_documented_workers_split_the_queues_as_the_demo_does() -> None:
    documented = sorted(
        sorted(command[command.index("-Q") + 1].split(","))
        for unit in server_units()
        if "worker" in (command := unit_command(unit))
    )
    demo = sorted(
        sorted(argv[argv.index("--queues") + 1].split(",")) for argv in celery_workers().values()
    )
    assert documented == demo
    assert sorted(q for queues in documented for q in queues) == sorted(QUEUES)


def test_the_documented_web_unit_serves_behind_the_proxy_with_the_limits() -> None:
    command = unit_command(UNITS / "fleetwatch-web@.service")
    assert command[command.index("--port") + 1] == INSTANCE
    assert " ".join(UVICORN_LIMITS) in " ".join(command)


def test_exactly_one_beat_unit_is_documented() -> None:
    beats = [unit for unit in server_units() if "beat" in exec_start(unit)]
    assert [unit.name for unit in beats] == ["fleetwatch-beat.service"]


def test_the_agent_unit_is_the_one_the_agent_wheel_carries() -> None:
    documented = UNITS / "fleet-agent.service"
    shipped = ROOT / "agents" / "systemd" / "fleet-agent.service"
    assert documented.read_text() == shipped.read_text()
    assert exec_start(documented)[1:3] == ["run", "--config"]
