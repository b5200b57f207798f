"""`fleetwatch`: the server's command, installed with its wheel (docs/operations.md).

    fleetwatch serve  [--host H] [--port P]      the web server: pages, live sockets, ingest
    fleetwatch worker [--queues Q,...] [...]     a Celery worker (default: every queue)
    fleetwatch beat   [--schedule PATH]          the Celery beat (run exactly one)
    fleetwatch manage COMMAND ...                Django's commands: migrate, createsuperuser,
                                                 import_inventory, partitions, ...

`serve`, `worker` and `beat` replace this process with uvicorn or Celery (exec), so a
service manager's signals reach the server itself. Options this command does not know are
handed to uvicorn or Celery unchanged (`fleetwatch serve --forwarded-allow-ips 10.0.0.5`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

SETTINGS_MODULE = "fleetwatch.settings"
ASGI_APPLICATION = "fleetwatch.asgi:application"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["manage"]:
        return manage(args[1:])
    parser = _parser()
    known, passthrough = parser.parse_known_args(args)
    if known.command is None:
        parser.print_help()
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    command: list[str] = COMMANDS[known.command](known)
    os.execv(sys.executable, [sys.executable, *command, *passthrough])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleetwatch", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("serve", help="the web server (uvicorn with the server's limits)")
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (behind a proxy)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="info")

    p = sub.add_parser("worker", help="a Celery worker")
    p.add_argument(
        "--queues",
        default=",".join(all_queues()),
        help="comma-separated queues to consume (default: all of them)",
    )
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--name", default=None, help="worker name (Celery's -n), e.g. alerts@%%h")
    p.add_argument("--loglevel", default="INFO")

    p = sub.add_parser("beat", help="the Celery beat: schedules the periodic tasks")
    p.add_argument("--schedule", default=None, help="where beat keeps its schedule file")
    p.add_argument("--loglevel", default="INFO")

    sub.add_parser("manage", help="Django's management commands (fleetwatch manage help)")
    return parser


def all_queues() -> tuple[str, ...]:
    from fleetwatch.celery import DEFAULT, MAINTENANCE, NOTIFICATIONS, PULL, RULES

    return (RULES, NOTIFICATIONS, DEFAULT, PULL, MAINTENANCE)


def serve_command(args: argparse.Namespace) -> list[str]:
    from fleetwatch.serve import UVICORN_LIMITS

    return [
        *("-m", "uvicorn", ASGI_APPLICATION),
        *("--host", args.host, "--port", str(args.port)),
        *("--lifespan", "off", "--log-level", args.log_level),
        *UVICORN_LIMITS,
    ]


def worker_command(args: argparse.Namespace) -> list[str]:
    command = ["-m", "celery", "-A", "fleetwatch", "worker", "-Q", args.queues]
    if args.concurrency is not None:
        command += ["--concurrency", str(args.concurrency)]
    if args.name:
        command += ["-n", args.name]
    return [*command, "--loglevel", args.loglevel]


def beat_command(args: argparse.Namespace) -> list[str]:
    command = ["-m", "celery", "-A", "fleetwatch", "beat", "--loglevel", args.loglevel]
    if args.schedule:
        command += ["--schedule", args.schedule]
    return command


COMMANDS = {"serve": serve_command, "worker": worker_command, "beat": beat_command}


def manage(args: Sequence[str]) -> int:
    """Django's `manage.py`, from the installed package (no checkout needed)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    from django.core.management import execute_from_command_line

    execute_from_command_line(["fleetwatch manage", *args])
    return 0


if __name__ == "__main__":
    sys.exit(main())
