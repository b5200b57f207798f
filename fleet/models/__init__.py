"""The inventory and agent registry: Site → Hall → Rack → Node → GPU, feeds, loops, meters."""

from __future__ import annotations

from fleet.models.access import SiteRole, SiteRoleChoices
from fleet.models.agents import EnrollmentToken, SourceToken, hash_token, new_secret
from fleet.models.cooling import CoolingLoop
from fleet.models.events import Event
from fleet.models.fabric import FabricPort
from fleet.models.facility import FacilityMeter, pue_category_for_roles
from fleet.models.ingest import IngestWriter
from fleet.models.nodes import GPU, Node
from fleet.models.prometheus import PrometheusSource, PulledGPU, UnmatchedSeries
from fleet.models.racks import PowerFeed, Rack
from fleet.models.rejections import RejectionTally
from fleet.models.remote_write import RemoteWriteCursor
from fleet.models.sites import Hall, Site
from fleet.models.system import DatabaseSize
from fleet.models.workloads import GpuAllocation, Workload, WorkloadSnapshot

__all__ = (
    "GPU",
    "CoolingLoop",
    "DatabaseSize",
    "EnrollmentToken",
    "Event",
    "FabricPort",
    "FacilityMeter",
    "GpuAllocation",
    "Hall",
    "IngestWriter",
    "Node",
    "PowerFeed",
    "PrometheusSource",
    "PulledGPU",
    "Rack",
    "RejectionTally",
    "RemoteWriteCursor",
    "Site",
    "SiteRole",
    "SiteRoleChoices",
    "SourceToken",
    "UnmatchedSeries",
    "Workload",
    "WorkloadSnapshot",
    "hash_token",
    "new_secret",
    "pue_category_for_roles",
)
