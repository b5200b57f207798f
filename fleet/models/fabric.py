"""Each InfiniBand/RoCE port of a node as its agent last read it (docs/protocol.md `fabric`).

Written only by the ingest writer (fleet/storage/fabric.py), in the commit that stores the
batch; people read it. One row per (node, device, port): the newest state, the counters as
read, and each counter's rise since the port was first seen (a counter that goes down was
reset, by a reboot or `perfquery -R`: what it reads after the reset is all rise); and when it
was last ACTIVE and the checkpoints its error rates are measured from.
"""

from __future__ import annotations

from django.db import models

__all__ = ("FabricPort",)


class FabricPort(models.Model):
    """One RDMA port of a node: an HCA's InfiniBand port, or a RoCE NIC's."""

    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="fabric_ports")
    device = models.CharField(max_length=64, help_text="RDMA device, e.g. mlx5_0")
    port = models.PositiveSmallIntegerField(help_text="port number on the device")
    ts = models.FloatField(help_text="epoch seconds of the newest read stored")
    first_seen = models.FloatField(help_text="epoch seconds of the first read stored")
    state = models.CharField(max_length=64, blank=True, help_text="IBA port state: ACTIVE, DOWN…")
    phys_state = models.CharField(max_length=64, blank=True, help_text="LinkUp, Polling…")
    rate = models.CharField(max_length=64, blank=True, help_text="e.g. 400 Gb/sec (4X NDR)")
    link_layer = models.CharField(max_length=64, blank=True, help_text="InfiniBand or Ethernet")
    counters = models.JSONField(default=dict, help_text="as read; absent: unsupported")
    rises = models.JSONField(default=dict, help_text="each counter's rise since first seen")
    # What the fabric rules judge (fleet/health/fabric.py), kept by the ingest writer.
    last_active = models.FloatField(
        null=True, blank=True, help_text="epoch seconds of the newest read that found it ACTIVE"
    )
    rate_base = models.JSONField(
        default=dict, help_text="rate checkpoint: {ts, rises} the error rates are measured from"
    )
    rate_next = models.JSONField(
        default=dict, help_text="the next rate checkpoint, the base once RATE_WINDOW_S old"
    )

    class Meta:
        ordering = ("node", "device", "port")
        constraints = [
            models.UniqueConstraint(fields=("node", "device", "port"), name="fabric_port_once")
        ]

    def __str__(self) -> str:
        return f"{self.device}/{self.port}"
