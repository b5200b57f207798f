# Who runs on each GPU, as intervals (issue 21, item 2): workloads per site, their
# GPU/MIG intervals, and each node's newest applied snapshot (fleet/models/workloads.py,
# fleet/storage/workloads.py).

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

# PostgreSQL: every open interval's last_seen is rewritten each 10 s snapshot. Room on each
# page lets that update stay on its page (HOT: no indexed column changes), as
# 0013_latest_tables_fillfactor does for latest state; less room than there, since most
# rows are closed intervals that are never updated again. SQLite: nothing to do.
OPTIONS = (
    "fillfactor = 70, autovacuum_vacuum_scale_factor = 0.0,"
    " autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_cost_delay = 0"
)
DEFAULTS = (
    "fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,"
    " autovacuum_vacuum_cost_delay"
)


def _room_for_updates(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE fleet_gpuallocation SET ({OPTIONS})")


def _defaults(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE fleet_gpuallocation RESET ({DEFAULTS})")


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0020_gpu_limits_reported"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkloadSnapshot",
            fields=[
                (
                    "node",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="fleet.node",
                    ),
                ),
                ("ts", models.FloatField()),
            ],
        ),
        migrations.CreateModel(
            name="Workload",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("pod", "Kubernetes pod"),
                            ("slurm", "Slurm job"),
                            ("container", "container"),
                            ("user", "Unix user"),
                        ],
                        max_length=10,
                    ),
                ),
                (
                    "key",
                    models.CharField(
                        help_text="stable identity within kind: namespace/pod (else pod UID), Slurm job ID or SLUID, container ID, or uid",
                        max_length=520,
                    ),
                ),
                (
                    "namespace",
                    models.CharField(blank=True, help_text="Kubernetes namespace", max_length=253),
                ),
                ("pod", models.CharField(blank=True, help_text="pod name", max_length=253)),
                ("pod_uid", models.CharField(blank=True, help_text="pod UID", max_length=253)),
                (
                    "container",
                    models.CharField(blank=True, help_text="container name", max_length=253),
                ),
                (
                    "container_id",
                    models.CharField(blank=True, help_text="container ID", max_length=253),
                ),
                (
                    "job",
                    models.CharField(blank=True, help_text="Slurm job ID or SLUID", max_length=253),
                ),
                (
                    "step",
                    models.CharField(
                        blank=True, help_text="Slurm step, as last reported", max_length=253
                    ),
                ),
                ("user", models.CharField(blank=True, help_text="user name", max_length=253)),
                ("uid", models.BigIntegerField(blank=True, help_text="Unix user ID", null=True)),
                (
                    "account",
                    models.CharField(blank=True, help_text="Slurm account", max_length=253),
                ),
                (
                    "first_seen",
                    models.FloatField(help_text="epoch seconds of the first snapshot naming it"),
                ),
                (
                    "site",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="workloads",
                        to="fleet.site",
                    ),
                ),
            ],
            options={
                "ordering": ("site", "kind", "key"),
            },
        ),
        migrations.CreateModel(
            name="GpuAllocation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("gpu", models.PositiveSmallIntegerField(help_text="GPU index on the node")),
                ("mig", models.CharField(blank=True, help_text="MIG device UUID", max_length=253)),
                (
                    "source",
                    models.CharField(
                        choices=[("scheduler", "scheduler allocation"), ("process", "GPU process")],
                        max_length=10,
                    ),
                ),
                (
                    "started",
                    models.FloatField(
                        help_text="epoch seconds of the first snapshot that showed it"
                    ),
                ),
                (
                    "last_seen",
                    models.FloatField(
                        help_text="epoch seconds of the last snapshot that showed it"
                    ),
                ),
                (
                    "ended",
                    models.FloatField(
                        blank=True,
                        help_text="epoch seconds of the first snapshot without it",
                        null=True,
                    ),
                ),
                (
                    "pid",
                    models.PositiveIntegerField(
                        blank=True, help_text="a process (lowest PID)", null=True
                    ),
                ),
                (
                    "memory_mib",
                    models.FloatField(
                        blank=True, help_text="peak GPU memory of its processes together", null=True
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="allocations",
                        to="fleet.node",
                    ),
                ),
                (
                    "site",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="fleet.site",
                    ),
                ),
                (
                    "workload",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="allocations",
                        to="fleet.workload",
                    ),
                ),
            ],
            options={
                "verbose_name": "GPU allocation",
                "ordering": ("-started",),
            },
        ),
        migrations.AddConstraint(
            model_name="workload",
            constraint=models.UniqueConstraint(
                fields=("site", "kind", "key"), name="workload_unique_key"
            ),
        ),
        migrations.AddIndex(
            model_name="gpuallocation",
            index=models.Index(
                fields=["site", "ended", "started"], name="gpuallocation_site_ended"
            ),
        ),
        migrations.AddConstraint(
            model_name="gpuallocation",
            constraint=models.UniqueConstraint(
                condition=models.Q(("ended__isnull", True)),
                fields=("node", "gpu", "mig", "workload", "source"),
                name="gpuallocation_open_once",
            ),
        ),
        migrations.RunPython(_room_for_updates, _defaults),
    ]
