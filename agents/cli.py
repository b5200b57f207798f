"""`fleet-agent`: enroll, run, check, simulate.

Exit codes: 0 done, 1 a runtime failure, 2 bad usage or configuration, 3 the server refused
our credentials (re-enrol).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from agents import __version__
from agents import log as logs
from agents.enroll import EnrollError, enroll, write_token

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_REJECTED = 3

DEFAULT_TOKEN_FILE = Path("/var/lib/fleet-agent/token")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    handler = _COMMANDS[args.command]
    return handler(args)


def _parser() -> argparse.ArgumentParser:
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

    p = sub.add_parser("simulate", help="run many virtual nodes and a site against a server")
    p.add_argument("--server", required=True)
    p.add_argument("--enroll-token", required=True)
    p.add_argument("--nodes", type=int, default=None, help="the first N nodes of the inventory")
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="KIND[:TARGET][@START][+DURATION][,k=v] (docs/simulator.md); repeatable",
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--spool-dir", type=Path, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--site-direct",
        action="store_true",
        help="send the site's readings straight from the model, not through the loopback "
        "SNMP/Redfish/Modbus devices and the facility collectors",
    )
    p.add_argument(
        "--facility-interval",
        type=float,
        default=5.0,
        help="seconds between polls of the site's devices (default 5)",
    )

    from agents.runconfig import add_run_arguments

    add_run_arguments(sub.add_parser("run", help="collect and send until SIGTERM"))
    add_run_arguments(sub.add_parser("check", help="what each collector sees on this machine"))
    return parser


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


def _cmd_simulate(args: argparse.Namespace) -> int:
    from agents.sim.faults import FaultPlan, FaultSpecError, parse_fault
    from agents.sim.inventory import InventoryError, fetch_inventory
    from agents.sim.runner import SimSettings, Simulator

    if args.facility_interval <= 0:
        print("fleet-agent: --facility-interval must be positive", file=sys.stderr)
        return EXIT_USAGE
    try:
        plan = FaultPlan([parse_fault(spec) for spec in args.fault])
    except FaultSpecError as exc:
        print(f"fleet-agent: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        inventory = fetch_inventory(args.server, args.enroll_token).first_nodes(args.nodes)
    except InventoryError as exc:
        print(f"fleet-agent: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    spool_root = args.spool_dir or Path(tempfile.gettempdir()) / f"fleet-sim-{inventory.site_slug}"
    settings = SimSettings(
        server=args.server,
        enroll_token=args.enroll_token,
        spool_root=spool_root,
        interval_s=args.interval,
        seed=args.seed,
        site_devices=not args.site_direct,
        facility_interval_s=args.facility_interval,
    )
    simulator = Simulator(settings, inventory, plan)

    async def go() -> None:
        try:
            await simulator.enroll_all()
        except EnrollError as exc:
            raise SystemExit(f"fleet-agent: enrolment failed: {exc}") from None
        task = asyncio.create_task(simulator.run(args.duration))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from agents.runner import run_command

    return run_command(args)


def _cmd_check(args: argparse.Namespace) -> int:
    from agents.check import check_command

    return check_command(args)


_COMMANDS = {
    "enroll": _cmd_enroll,
    "simulate": _cmd_simulate,
    "run": _cmd_run,
    "check": _cmd_check,
}


if __name__ == "__main__":
    sys.exit(main())
