"""`fleet-agent simulate`: the simulator's subcommand, added to the agent's command line by
the server's distribution (entry point group `fleet_agent.commands`).

The simulator ships with the server (`pip install fleetwatch`), not with the node agent:
a GPU node never installs virtual nodes, simulated devices or the fake NVML.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.enroll import EnrollError

EXIT_FAILURE = 1
EXIT_USAGE = 2


def register(subparsers: Any) -> Callable[[argparse.Namespace], int]:
    """Add `simulate` to `fleet-agent`'s subcommands; return what runs it."""
    p = subparsers.add_parser("simulate", help="run many virtual nodes and a site against a server")
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
    p.add_argument(
        "--seed", type=int, default=0, help="seeds the physics and the job schedule (default 0)"
    )
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
    p.add_argument(
        "--no-jobs",
        action="store_true",
        help="no pods or Slurm jobs on the GPUs (no `workloads` part): each node's load "
        "wanders on its own",
    )
    p.add_argument(
        "--jobs-dir",
        type=Path,
        default=None,
        help="where each node's fake /proc and pod-resources socket go "
        "(default: jobs/ in the spool directory)",
    )
    p.add_argument(
        "--no-fabric",
        action="store_true",
        help="no InfiniBand ports (no `fabric` part)",
    )
    p.add_argument(
        "--fabric-dir",
        type=Path,
        default=None,
        help="where each node's fake sysfs tree of InfiniBand ports goes "
        "(default: sysfs/ in the spool directory)",
    )
    return simulate


def simulate(args: argparse.Namespace) -> int:
    from fleetsim.faults import FaultPlan, FaultSpecError, parse_fault
    from fleetsim.inventory import InventoryError, fetch_inventory
    from fleetsim.runner import SimSettings, Simulator

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
        jobs=not args.no_jobs,
        jobs_dir=args.jobs_dir,
        fabric=not args.no_fabric,
        fabric_dir=args.fabric_dir,
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
