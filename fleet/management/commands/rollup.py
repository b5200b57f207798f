from __future__ import annotations

from fleet.management.maintenance_pass import MaintenancePassCommand
from fleet.storage.rollups import rollup_all


class Command(MaintenancePassCommand):
    help = "Bring the 1-minute and 1-hour rollups up to date (what the fleet.rollup task runs)."
    now_help = "epoch seconds to roll up to (default: now)"
    counted = "rows"

    def run_pass(self, now: float) -> dict[str, int]:
        return rollup_all(now)
