"""Create the time-series tables (raw, latest, 1m, 1h per sample kind) from a frozen column list."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from fleet.storage import schema

FROZEN_COLUMNS = {
    "gpu": [
        ("util_gpu_pct", False),
        ("util_mem_pct", False),
        ("mem_used_mib", False),
        ("mem_total_mib", False),
        ("temp_gpu_c", False),
        ("temp_mem_c", False),
        ("temp_margin_c", False),
        ("power_w", False),
        ("power_instant_w", False),
        ("power_limit_w", False),
        ("energy_j", False),
        ("clock_sm_mhz", False),
        ("clock_mem_mhz", False),
        ("pstate", True),
        ("clock_event_reasons", True),
        ("violation_power_ns", True),
        ("violation_thermal_ns", True),
        ("slowdown_sw_thermal_ns", True),
        ("slowdown_hw_thermal_ns", True),
        ("slowdown_hw_power_brake_ns", True),
        ("ecc_sbe_vol_total", True),
        ("ecc_dbe_vol_total", True),
        ("remapped_rows_correctable", True),
        ("remapped_rows_uncorrectable", True),
        ("remap_pending", True),
        ("remap_failure", True),
        ("pcie_replay_total", True),
        ("pcie_tx_kib_s", False),
        ("pcie_rx_kib_s", False),
        ("nvlink_up", True),
        ("nvlink_crc_errors_total", True),
        ("nvlink_replay_total", True),
        ("nvlink_recovery_total", True),
        ("fan_pct", False),
    ],
    "node": [
        ("cpu_pct", False),
        ("load1", False),
        ("mem_used_mib", False),
        ("mem_total_mib", False),
        ("temp_cpu_c", False),
        ("temp_inlet_c", False),
        ("temp_outlet_c", False),
        ("power_w", False),
        ("disk_read_bytes_s", False),
        ("disk_write_bytes_s", False),
        ("net_rx_bytes_s", False),
        ("net_tx_bytes_s", False),
    ],
    "rack": [
        ("power_w", False),
        ("energy_kwh", False),
        ("temp_inlet_c", False),
        ("temp_outlet_c", False),
        ("humidity_pct", False),
        ("liquid_supply_c", False),
        ("liquid_return_c", False),
        ("liquid_flow_lpm", False),
        ("liquid_dp_kpa", False),
        ("leak", True),
    ],
    "feed": [
        ("power_w", False),
        ("current_a", False),
        ("voltage_v", False),
        ("energy_kwh", False),
    ],
    "loop": [
        ("supply_c", False),
        ("return_c", False),
        ("delta_c", False),
        ("flow_lpm", False),
        ("supply_kpa", False),
        ("return_kpa", False),
        ("dp_kpa", False),
        ("heat_removed_kw", False),
        ("primary_supply_c", False),
        ("primary_return_c", False),
        ("primary_flow_lpm", False),
        ("pump_speed_pct", False),
        ("pumps_running", True),
        ("pumps_failed", True),
        ("leak", True),
        ("reservoir_low", True),
    ],
    "facility": [
        ("total_power_w", False),
        ("it_power_w", False),
        ("pue", False),
        ("pue_category", True),
        ("cooling_power_w", False),
        ("outdoor_c", False),
        ("total_energy_kwh", False),
        ("it_energy_kwh", False),
    ],
}


def forwards(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for statement in schema.create_all(FROZEN_COLUMNS, vendor):
        schema_editor.execute(statement)


def backwards(apps: Any, schema_editor: Any) -> None:
    for statement in schema.drop_all(list(FROZEN_COLUMNS)):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("fleet", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
