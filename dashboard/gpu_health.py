"""The "GPUs to act on" page /health/: per site the user may see, how many GPUs are in each
health state, the GPUs that need a reset or a replacement with their evidence (each
criterion links its public source), the nodes they are in, and the GPUs on watch.
`?format=csv` gives the GPUs to act on in the columns a vendor's RMA form asks for;
`?site=<id>` one site (404 for a site the user may not see, as the capacity page does).
fleet/health/record.py decides every state; fleet/read/health_record.py reads the facts.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.capacity import chosen_sites
from fleet.health import record as hr
from fleet.read.health_record import GpuRecord, NodeRecord, node_records, site_records
from fleet.words import utc_minute

clock = time.time  # tests pass the moment by hand

CSV_COLUMNS = (
    "site",
    "node",
    "gpu_index",
    "pci_bus_id",
    "model",
    "serial",
    "uuid",
    "state",
    "action",
    "evidence",
    "first_seen_utc",
    "last_seen_utc",
    # What the vendor asks about the memory: counts, "not supported", or empty (not reported)
    "ecc_sbe_aggregate",
    "ecc_dbe_aggregate",
    "retired_pages_sbe",
    "retired_pages_dbe",
    "retired_pages_pending",
    "resets_30d",
)
# The GpuFacts fields the memory columns hold, in their order.
CSV_MEMORY_FACTS = (
    "ecc_sbe_aggregate",
    "ecc_dbe_aggregate",
    "retired_pages_sbe",
    "retired_pages_dbe",
    "retired_pages_pending",
)
NOT_SUPPORTED = "not supported"


def moment(ts: float | None) -> str:
    return "" if ts is None else utc_minute(ts)


def evidence_line(e: hr.Evidence) -> str:
    """One criterion met, as the CSV has it: "criterion: observed (source URL)"."""
    return f"{e.criterion}: {e.observed} ({e.url})"


def identity(r: GpuRecord) -> str:
    """What identifies the board to a vendor: its serial, else its UUID, else neither."""
    if r.serial:
        return f"serial {r.serial}"
    return r.uuid or "serial and UUID unknown"


@dataclass
class Row:
    """A GPU to act on as the table says it."""

    r: GpuRecord

    @property
    def first(self) -> str:
        return moment(self.r.first_seen) or "–"

    @property
    def last(self) -> str:
        return moment(self.r.last_seen) or "–"


@dataclass
class SiteHealth:
    id: int
    name: str
    records: list[GpuRecord]
    nodes: list[NodeRecord]

    @property
    def counts(self) -> list[tuple[str, int]]:
        """(state, GPUs in it), worst first."""
        return list(hr.state_counts(r.state for r in self.records).items())

    @property
    def act_on(self) -> list[GpuRecord]:
        return [r for r in self.records if r.state in hr.ACT_ON]

    @property
    def act_on_rows(self) -> list[Row]:
        return [Row(r) for r in self.act_on]

    @property
    def watch(self) -> list[GpuRecord]:
        return [r for r in self.records if r.state == hr.WATCH]

    @property
    def nodes_to_act_on(self) -> list[NodeRecord]:
        return [n for n in self.nodes if n.state in hr.ACT_ON]

    def csv_rows(self) -> list[list[str]]:
        return [
            [
                self.name,
                r.node,
                str(r.index),
                r.pci_bus_id,
                r.model,
                r.serial,
                r.uuid,
                r.state,
                r.verdict.action,
                "; ".join(evidence_line(e) for e in r.verdict.evidence),
                moment(r.first_seen),
                moment(r.last_seen),
                *(csv_fact(r.facts, name) for name in CSV_MEMORY_FACTS),
                str(r.facts.resets),
            ]
            for r in self.act_on
        ]


def health_page(sites: list[tuple[int, str]], now: float) -> list[SiteHealth]:
    out = []
    for site_id, name in sites:
        records = site_records(site_id, now)
        out.append(SiteHealth(site_id, name, records, node_records(records)))
    return out


def as_csv(sites: list[SiteHealth]) -> HttpResponse:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for site in sites:
        writer.writerows(site.csv_rows())
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="gpus-to-act-on.csv"'
    return response


@login_required
@require_GET
def gpu_health_view(request: HttpRequest) -> HttpResponse:
    sites = health_page(chosen_sites(request), clock())
    if request.GET.get("format") == "csv":
        return as_csv(sites)
    site = f"&site={request.GET['site']}" if "site" in request.GET else ""
    context = {
        "sites": sites,
        "actions": [(s, hr.STATE_LEVELS[s], hr.STATE_ACTIONS[s]) for s in reversed(hr.STATES)],
        "as_of": utc_minute(clock()),
        "csv_url": f"?format=csv{site}",
    }
    return render(request, "dashboard/gpu_health.html", context)


NOT_REPORTED = "not reported by the agent"


def csv_fact(f: hr.GpuFacts, name: str) -> str:
    """A fact as the CSV has it: a plain number (a flag 1 or 0), "not supported", or empty
    where the agent did not report it."""
    if name in f.unsupported:
        return NOT_SUPPORTED
    value = getattr(f, name)
    return "" if value is None else str(int(value))


def _count(value: int | None, unsupported: bool = False) -> str:
    if unsupported:
        return NOT_SUPPORTED
    return NOT_REPORTED if value is None else f"{value:,}"


def _flag(value: bool | None, unsupported: bool = False) -> str:
    if unsupported:
        return NOT_SUPPORTED
    return NOT_REPORTED if value is None else ("yes" if value else "no")


def record_figures(f: hr.GpuFacts) -> list[tuple[str, str]]:
    """The record's fields as the GPU page lists them: (label, value); a field the agent
    does not send says so, never zero, and one the GPU does not have says "not supported"."""
    reset = "none seen" if f.last_reset_ts is None else f"by {utc_minute(f.last_reset_ts)}"
    thermal_h = f.thermal_slowdown_h
    no = f.unsupported
    return [
        ("Last reset or driver reload", reset),
        ("Resets and driver reloads, 30 days", str(f.resets)),
        ("Fell off the bus, 30 days", f"{len(f.off_the_bus)} times"),
        ("ECC single-bit, volatile", _count(f.ecc_sbe_volatile)),
        ("ECC double-bit, volatile", _count(f.ecc_dbe_volatile)),
        ("ECC single-bit, aggregate", _count(f.ecc_sbe_aggregate, "ecc_sbe_aggregate" in no)),
        ("ECC double-bit, aggregate", _count(f.ecc_dbe_aggregate, "ecc_dbe_aggregate" in no)),
        ("Rows remapped, correctable", _count(f.remapped_correctable)),
        ("Rows remapped, uncorrectable", _count(f.remapped_uncorrectable)),
        ("Row remap pending", _flag(f.remap_pending)),
        ("Row remap failure", _flag(f.remap_failure)),
        ("Retired pages, single-bit", _count(f.retired_pages_sbe, "retired_pages_sbe" in no)),
        ("Retired pages, double-bit", _count(f.retired_pages_dbe, "retired_pages_dbe" in no)),
        (
            "Page retirement pending",
            _flag(f.retired_pages_pending, "retired_pages_pending" in no),
        ),
        ("Thermal slowdown, 30 days", NOT_REPORTED if thermal_h is None else f"{thermal_h:.1f} h"),
        ("Excursions past slowdown, 30 days", _count(f.thermal_excursions)),
    ]


def xid_rows(f: hr.GpuFacts) -> list[tuple[str, str, str, str]]:
    """(XID, count, first seen, last seen) since the last reset, most frequent first."""
    return [
        (str(x.code), str(x.count), utc_minute(x.first_ts), utc_minute(x.last_ts)) for x in f.xids
    ]
