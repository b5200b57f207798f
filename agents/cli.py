"""`fleet-agent`: enroll, run, check — and simulate where the server's package is installed.

Exit codes: 0 done, 1 a runtime failure, 2 bad usage or configuration, 3 the server refused
our credentials (re-enrol).

Subcommands beyond the agent's own come from the entry point group `fleet_agent.commands`:
the server's distribution adds `simulate` there (fleetsim/cli.py), so the simulator is
never installed on a GPU node yet `fleet-agent simulate` works wherever the server is.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from agents import __version__
from agents import log as logs
from agents.enroll import EnrollError, enroll, write_token

Handler = Callable[[argparse.Namespace], int]
PLUGIN_GROUP = "fleet_agent.commands"

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_REJECTED = 3

DEFAULT_TOKEN_FILE = Path("/var/lib/fleet-agent/token")


def main(argv: Sequence[str] | None = None) -> int:
    commands: dict[str, Handler] = dict(_COMMANDS)
    parser = _parser(commands)
    args, unknown = parser.parse_known_args(argv)
    if unknown and commands.get(args.command) is not _simulator_absent:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    logs.configure(args.log_level)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    return commands[args.command](args)


def _parser(commands: dict[str, Handler]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleet-agent", description=__doc__)
    parser.add_argument("--version", action="version", version=f"fleet-agent {__version__}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("FLEET_AGENT_LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
    )
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("enroll", help="trade an enrolment token for this node's own token")
    p.add_argument("--server", required=True, help="backend URL, e.g. https://fleet.example")
    p.add_argument("--enroll-token", required=True)
    p.add_argument("--source", help="default: node:<hostname>")
    p.add_argument("--token-file", type=Path, default=DEFAULT_TOKEN_FILE)

    from agents.runconfig import add_run_arguments

    add_run_arguments(sub.add_parser("run", help="collect and send until SIGTERM"))
    add_run_arguments(sub.add_parser("check", help="what each collector sees on this machine"))
    _add_plugin_commands(sub, commands)
    return parser


def _add_plugin_commands(sub: Any, commands: dict[str, Handler]) -> None:
    """Subcommands other distributions add; `simulate` explains where it lives when absent."""
    for plugin in entry_points(group=PLUGIN_GROUP):
        if plugin.name not in commands:
            commands[plugin.name] = plugin.load()(sub)
    if "simulate" not in commands:
        sub.add_parser("simulate", help="(needs the server's package: pip install fleetwatch)")
        commands["simulate"] = _simulator_absent


def _simulator_absent(args: argparse.Namespace) -> int:
    print(
        "fleet-agent: the simulator ships with the server's package, not the node agent's; "
        "run it where `pip install fleetwatch` is installed",
        file=sys.stderr,
    )
    return EXIT_USAGE


def _cmd_enroll(args: argparse.Namespace) -> int:
    source = args.source or f"node:{socket.gethostname()}"
    try:
        token = enroll(args.server, args.enroll_token, source)
        write_token(args.token_file, token)
    except EnrollError as exc:
        print(f"fleet-agent: enrolment failed: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as exc:
        print(f"fleet-agent: cannot write {args.token_file}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"enrolled {source}; token stored in {args.token_file} (mode 0600)")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from agents.runner import run_command

    return run_command(args)


def _cmd_check(args: argparse.Namespace) -> int:
    from agents.check import check_command

    return check_command(args)


_COMMANDS: dict[str, Handler] = {
    "enroll": _cmd_enroll,
    "run": _cmd_run,
    "check": _cmd_check,
}


if __name__ == "__main__":
    sys.exit(main())
