from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand

from fleet.demo import DEMO_RACKS, ensure_enrollment_token, seed_demo_site


class Command(BaseCommand):
    help = "Create (or complete) the demo site; safe to run twice."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--slug", default="demo")
        parser.add_argument("--enroll-token", help="make this plain token valid for the site")
        parser.add_argument(
            "--racks", type=int, default=len(DEMO_RACKS), help="only the first N racks (tests)"
        )
        parser.add_argument(
            "--gpus-per-node", type=int, default=None, help="(tests) instead of each rack's own"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        site = seed_demo_site(opts["slug"], DEMO_RACKS[: opts["racks"]], opts["gpus_per_node"])
        if opts["enroll_token"]:
            ensure_enrollment_token(site, opts["enroll_token"])
        racks = site.halls.values_list("racks", flat=True).count()
        self.stdout.write(f"site {site.slug}: {racks} racks seeded")
