"""Who held and used each GPU, and when: the workloads agents report (docs/protocol.md
`workloads`) kept as intervals. Written only by the ingest writer
(fleet/storage/workloads.py); people read them.

Times are epoch seconds, as samples are. An interval is open while `ended` is null; a node
that goes silent keeps its intervals open, and `last_seen` says until when they are known:
readers take `coalesce(ended, last_seen)` as an interval's end."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

__all__ = ("GpuAllocation", "Workload", "WorkloadSnapshot")


class WorkloadKind(models.TextChoices):
    POD = "pod", "Kubernetes pod"
    SLURM = "slurm", "Slurm job"
    CONTAINER = "container", "container"
    USER = "user", "Unix user"


class AllocationSource(models.TextChoices):
    SCHEDULER = "scheduler", "scheduler allocation"
    PROCESS = "process", "GPU process"


_TEXT = 253  # the protocol's longest text (agents/protocol/workloads.py MAX_TEXT)


def _text(help_text: str) -> models.CharField[str, str]:
    return models.CharField(max_length=_TEXT, blank=True, help_text=help_text)


class Workload(models.Model):
    """One owner of GPU time at a site: a pod, a Slurm job, a container or a Unix user."""

    site = models.ForeignKey("fleet.Site", on_delete=models.CASCADE, related_name="workloads")
    kind = models.CharField(max_length=10, choices=WorkloadKind.choices)
    key = models.CharField(
        max_length=520,
        help_text="stable identity within kind: namespace/pod (else pod UID), Slurm job ID or"
        " SLUID, container ID, or uid",
    )
    namespace = _text("Kubernetes namespace")
    pod = _text("pod name")
    pod_uid = _text("pod UID")
    container = _text("container name")
    container_id = _text("container ID")
    job = _text("Slurm job ID or SLUID")
    step = _text("Slurm step, as last reported")
    user = _text("user name")
    uid = models.BigIntegerField(null=True, blank=True, help_text="Unix user ID")
    account = _text("Slurm account")
    first_seen = models.FloatField(help_text="epoch seconds of the first snapshot naming it")

    class Meta:
        ordering = ("site", "kind", "key")
        constraints = [
            models.UniqueConstraint(fields=("site", "kind", "key"), name="workload_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"

    @property
    def owner(self) -> str:
        """The owner as NetBox's tenancy would name it: namespace or account, and user."""
        parts = [p for p in (self.namespace or self.account, self.user) if p]
        return " / ".join(parts) or "—"


class GpuAllocation(models.Model):
    """One workload on one GPU (or MIG device) for a span of time: allocated by the
    scheduler, or seen running a process there."""

    # No index of its own: gpuallocation_site_ended leads with it.
    site = models.ForeignKey(
        "fleet.Site", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="allocations")
    gpu = models.PositiveSmallIntegerField(help_text="GPU index on the node")
    mig = models.CharField(max_length=_TEXT, blank=True, help_text="MIG device UUID")
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="allocations")
    source = models.CharField(max_length=10, choices=AllocationSource.choices)
    started = models.FloatField(help_text="epoch seconds of the first snapshot that showed it")
    last_seen = models.FloatField(help_text="epoch seconds of the last snapshot that showed it")
    ended = models.FloatField(
        null=True, blank=True, help_text="epoch seconds of the first snapshot without it"
    )
    pid = models.PositiveIntegerField(null=True, blank=True, help_text="a process (lowest PID)")
    memory_mib = models.FloatField(
        null=True, blank=True, help_text="peak GPU memory of its processes together"
    )

    class Meta:
        ordering = ("-started",)
        verbose_name = "GPU allocation"
        constraints = [
            # One open interval per (GPU, workload, source): what the writer's upsert keys
            # on, and the index for "open intervals of node N".
            models.UniqueConstraint(
                fields=("node", "gpu", "mig", "workload", "source"),
                condition=Q(ended__isnull=True),
                name="gpuallocation_open_once",
            )
        ]
        indexes = [
            # "Intervals overlapping [a, b) at site S": ended IS NULL OR ended >= a. Neither
            # column changes on the 10 s bump of last_seen, so PostgreSQL updates stay HOT.
            models.Index(fields=("site", "ended", "started"), name="gpuallocation_site_ended"),
        ]

    def __str__(self) -> str:
        where = f"{self.node_id}/gpu{self.gpu}" + (f" {self.mig}" if self.mig else "")
        return f"{self.workload_id} on {where} ({self.source})"


class WorkloadSnapshot(models.Model):
    """The newest workloads snapshot applied for a node: an older or resent one changes
    nothing (fleet/storage/workloads.py)."""

    node = models.OneToOneField(
        "fleet.Node", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    ts = models.FloatField()

    def __str__(self) -> str:
        return f"node {self.node_id} at {self.ts}"
