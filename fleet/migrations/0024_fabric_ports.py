# Each node's InfiniBand/RoCE ports as last read (issue 22, part 3): fleet/models/fabric.py,
# written by fleet/storage/fabric.py. A new table only.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0023_ledger_store"),
    ]

    operations = [
        migrations.CreateModel(
            name="FabricPort",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("device", models.CharField(help_text="RDMA device, e.g. mlx5_0", max_length=64)),
                ("port", models.PositiveSmallIntegerField(help_text="port number on the device")),
                ("ts", models.FloatField(help_text="epoch seconds of the newest read stored")),
                (
                    "first_seen",
                    models.FloatField(help_text="epoch seconds of the first read stored"),
                ),
                (
                    "state",
                    models.CharField(
                        blank=True, help_text="IBA port state: ACTIVE, DOWN…", max_length=64
                    ),
                ),
                (
                    "phys_state",
                    models.CharField(blank=True, help_text="LinkUp, Polling…", max_length=64),
                ),
                (
                    "rate",
                    models.CharField(
                        blank=True, help_text="e.g. 400 Gb/sec (4X NDR)", max_length=64
                    ),
                ),
                (
                    "link_layer",
                    models.CharField(blank=True, help_text="InfiniBand or Ethernet", max_length=64),
                ),
                (
                    "counters",
                    models.JSONField(default=dict, help_text="as read; absent: unsupported"),
                ),
                (
                    "rises",
                    models.JSONField(
                        default=dict, help_text="each counter's rise since first seen"
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="fabric_ports",
                        to="fleet.node",
                    ),
                ),
            ],
            options={
                "ordering": ("node", "device", "port"),
                "constraints": [
                    models.UniqueConstraint(
                        fields=("node", "device", "port"), name="fabric_port_once"
                    )
                ],
            },
        ),
    ]
