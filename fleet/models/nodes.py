"""GPU servers (nodes) and their GPUs, with each GPU's own limits."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from fleet.health.levels import GpuLimits
from fleet.health.limits import STORED_LIMITS, reported_column
from fleet.models.racks import Rack

__all__ = ("GPU", "Node")

hostname_validator = RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9.-]*$", "a hostname")
_ENTERED = "in force over the agent's reported value; blank: the agent's value applies"


class Node(models.Model):
    name = models.CharField(
        max_length=100, unique=True, validators=[hostname_validator], help_text="hostname"
    )
    rack = models.ForeignKey(Rack, on_delete=models.PROTECT, related_name="nodes")
    position = models.PositiveSmallIntegerField(default=0, help_text="rack unit")
    model = models.CharField(max_length=100, blank=True, help_text="e.g. HGX H200 8-GPU")
    info = models.JSONField(default=dict, blank=True, help_text="node_info from the agent")

    class Meta:
        ordering = ("rack", "position", "name")

    def __str__(self) -> str:
        return self.name

    @property
    def source(self) -> str:
        return f"node:{self.name}"


class GPU(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    model = models.CharField(max_length=100, blank=True)
    uuid = models.CharField(max_length=64, blank=True)
    # The device's own limits, from two sources kept apart (fleet/health/limits.py): the
    # value entered in the inventory or the admin, written by nothing else, and the value
    # its agent reported in gpu_info, written by nothing else. In force: entered, else
    # reported — so an agent that cannot report a limit never erases the entered one.
    slowdown_c = models.FloatField(null=True, blank=True, help_text=_ENTERED)
    shutdown_c = models.FloatField(null=True, blank=True, help_text=_ENTERED)
    gpu_max_c = models.FloatField(null=True, blank=True, help_text=_ENTERED)
    mem_max_c = models.FloatField(null=True, blank=True, help_text=_ENTERED)
    tlimit_slowdown_c = models.FloatField(
        null=True, blank=True, help_text="slowdown as a T.Limit offset (e.g. −2); " + _ENTERED
    )
    power_limit_max_w = models.FloatField(null=True, blank=True, help_text=_ENTERED)
    reported_slowdown_c = models.FloatField(null=True, editable=False)
    reported_shutdown_c = models.FloatField(null=True, editable=False)
    reported_gpu_max_c = models.FloatField(null=True, editable=False)
    reported_mem_max_c = models.FloatField(null=True, editable=False)
    reported_tlimit_slowdown_c = models.FloatField(null=True, editable=False)
    reported_power_limit_max_w = models.FloatField(null=True, editable=False)
    info = models.JSONField(default=dict, blank=True, help_text="gpu_info from the agent")
    # A GPU an agent described before the inventory had it (fleet/ingest/resolve.py) waits
    # for an admin to accept it; the inventory's own GPUs have no discovered_at.
    discovered_at = models.DateTimeField(
        null=True, blank=True, help_text="when an agent described it before the inventory had it"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ("node", "index")
        verbose_name = "GPU"
        verbose_name_plural = "GPUs"
        constraints = [models.UniqueConstraint(fields=("node", "index"), name="gpu_unique_index")]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"

    def entered_limits(self) -> GpuLimits:
        """The limits an operator entered (inventory import or admin)."""
        return GpuLimits(**{name: getattr(self, name) for name in STORED_LIMITS})

    def reported_limits(self) -> GpuLimits:
        """The limits its agent last reported in gpu_info."""
        return GpuLimits(**{name: getattr(self, reported_column(name)) for name in STORED_LIMITS})

    @property
    def awaiting_acceptance(self) -> bool:
        return self.discovered_at is not None and self.accepted_at is None

    def clean(self) -> None:
        # The driver slows the GPU before it shuts it down, never after.
        both = self.slowdown_c is not None and self.shutdown_c is not None
        if both and self.slowdown_c > self.shutdown_c:  # type: ignore[operator]
            raise ValidationError({"slowdown_c": "slowdown must not exceed shutdown"})
        if self.index is not None and self.index > 1023:
            raise ValidationError({"index": "GPU index must be 0–1023"})
