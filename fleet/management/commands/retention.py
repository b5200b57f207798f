from __future__ import annotations

from fleet.management.maintenance_pass import MaintenancePassCommand
from fleet.storage.retention import apply_retention


class Command(MaintenancePassCommand):
    help = "Delete rows past each tier's retention (what the fleet.retention task runs)."
    now_help = "epoch seconds to apply it at (default: now)"
    counted = "rows deleted"

    def run_pass(self, now: float) -> dict[str, int]:
        return apply_retention(now)
