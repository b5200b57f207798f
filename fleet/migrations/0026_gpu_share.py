"""Per-process SM activity on shared GPUs, per minute (issue 21; fleet/storage/gpu_share.py).

`fw_gpu_share_1m`: per node, GPU, minute (`bucket`, epoch seconds) and workload, the sum of
its processes' SM activity (`sm_sum`, % summed over the snapshots of that minute) and how
many snapshots that was (`samples`). Written only for a GPU that a snapshot shows running
processes of two or more workloads with the SM activity NVML reports; the ledger splits
such a GPU's energy by it (docs/ledger.md, A job's energy).

The key leads with the minute: retention deletes the oldest minutes (min(bucket) is the
index's first entry) and a snapshot's rows land at the index's right edge; the ledger reads
it by the whole key. New table only: works on a populated database of either engine.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def forwards(apps: Any, schema_editor: Any) -> None:
    real = "DOUBLE PRECISION" if schema_editor.connection.vendor == "postgresql" else "REAL"
    schema_editor.execute(
        "CREATE TABLE fw_gpu_share_1m (bucket BIGINT NOT NULL, node_id INTEGER NOT NULL,"
        f" gpu INTEGER NOT NULL, workload_id INTEGER NOT NULL, sm_sum {real} NOT NULL,"
        " samples INTEGER NOT NULL, PRIMARY KEY (bucket, node_id, gpu, workload_id))"
    )


def backwards(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP TABLE fw_gpu_share_1m")


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0025_site_idle_energy_grid_intensity"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
