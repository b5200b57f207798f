"""/metrics series of Fleetwatch's own operation: open incidents and alert instances, each
enrolled source's last batch and cadence, Slack deliveries, refused input and the ingest
writers' counters. Gathered by fleet/read/metrics/export.py, whose conventions (units in
names, bounded labels) they follow."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Count, Sum

from fleet import health
from fleet.read.site_summary import open_incidents
from fleet.read.state import select_rows

if TYPE_CHECKING:
    from fleet.read.metrics.export import Families


def incidents_series(f: Families, sites: dict[int, str]) -> None:
    """Incidents first (fleet/alerts/grouping.py): one failure is one incident, however
    many alert instances it holds; the instances follow in `fleetwatch_alerts`."""
    count = f.gauge(
        "fleetwatch_incidents",
        "open incidents with alerts firing, by their worst member's severity",
        ["site", "severity"],
    )
    members = f.gauge(
        "fleetwatch_incident_alerts_firing",
        "alerts firing in each open incident (incident: its group key, e.g. loop:3)",
        ["site", "incident"],
    )
    for site_id, incidents in open_incidents(list(sites)).items():
        slug = sites.get(site_id, "")
        by_severity: dict[str, int] = {}
        for incident in incidents:
            by_severity[incident["severity"]] = by_severity.get(incident["severity"], 0) + 1
            members.add_metric([slug, incident["key"]], float(incident["alerts"]))
        for severity, n in sorted(by_severity.items()):
            count.add_metric([slug, severity], float(n))


def alerts_series(f: Families) -> None:
    from fleet.alerts.models import ACTIVE_STATES, AlertInstance

    alerts = f.gauge(
        "fleetwatch_alerts", "alert instances now, by state and severity", ["state", "severity"]
    )
    rows = (
        AlertInstance.objects.filter(state__in=ACTIVE_STATES)
        .values("state", "rule__severity")
        .annotate(n=Count("id"))
    )
    for row in rows:
        alerts.add_metric([row["state"], row["rule__severity"]], float(row["n"]))


def sources_series(f: Families, now: float) -> None:
    age = f.gauge(
        "fleetwatch_agent_last_batch_age_seconds",
        "seconds since each enrolled source's last batch (absent: never sent one)",
        ["source", "kind"],
    )
    interval = f.gauge(
        "fleetwatch_agent_batch_interval_seconds",
        "each enrolled source's batch interval as it declared it (else its kind's default):"
        " what its silence is counted in",
        ["source", "kind"],
    )
    stale = f.gauge(
        "fleetwatch_agents_stale",
        f"sources whose last batch is {health.STALE_INTERVALS:g} or more of their own"
        f" batch intervals old (at least {health.STALE_AFTER_S:g} s)",
        [],
    )
    count = 0
    rows = select_rows(
        "SELECT source, kind, last_seen, sample_interval_s, batch_interval_s"
        " FROM fleet_sourcetoken WHERE revoked = %s",
        [False],
    )
    for source, kind, last_seen, sample_s, batch_s in rows:
        batch_interval = health.batch_interval_s(kind, sample_s, batch_s)
        interval.add_metric([source, kind], batch_interval)
        if last_seen is None:
            continue
        seconds = max(0.0, now - float(last_seen))
        age.add_metric([source, kind], round(seconds, 3))
        count += health.source_stale(float(last_seen), now, batch_interval)
    stale.add_metric([], float(count))


def deliveries_series(f: Families) -> None:
    from fleet.notifications.models import Delivery

    deliveries = f.gauge(
        "fleetwatch_slack_deliveries", "Slack messages by delivery state (kept history)", ["state"]
    )
    for row in Delivery.objects.values("state").annotate(n=Count("id")):
        deliveries.add_metric([row["state"]], float(row["n"]))


def rejections_series(f: Families) -> None:
    from fleet.models import RejectionTally

    refused = f.counter(
        "fleetwatch_ingest_rejections",
        "agent input refused, by transport and HTTP status (counted per source in the admin)",
        ["transport", "status"],
    )
    for row in RejectionTally.objects.values("transport", "status").annotate(n=Sum("count")):
        refused.add_metric([row["transport"], str(row["status"])], float(row["n"] or 0))


INGEST_COUNTERS = (
    ("batches", "fleetwatch_ingest_batches", "batches stored and acknowledged"),
    ("samples", "fleetwatch_ingest_samples", "samples in the stored batches"),
    ("refused", "fleetwatch_ingest_refused_batches", "batches the writers refused (400)"),
    ("retried", "fleetwatch_ingest_retried_batches", "batches answered 503: not stored, resent"),
    (
        "too_old",
        "fleetwatch_ingest_too_old_samples",
        "samples older than raw retention: acknowledged, not stored",
    ),
    ("saves", "fleetwatch_ingest_latest_saves", "latest-state saves"),
    ("save_failures", "fleetwatch_ingest_latest_save_failures", "latest-state saves that failed"),
)


def ingest_series(f: Families) -> None:
    """Each ingest writer saves its counters every 10 s (fleet/ingest/child.py): sums over
    every writer that ever ran, so a restart never makes a counter go down."""
    from fleet.models import IngestWriter

    columns = [column for column, _, _ in INGEST_COUNTERS]
    totals = IngestWriter.objects.aggregate(
        starts=Count("id"), **{column: Sum(column) for column in columns}
    )
    for column, name, doc in INGEST_COUNTERS:
        f.counter(name, doc, []).add_metric([], float(totals[column] or 0))
    f.counter(
        "fleetwatch_ingest_writer_starts",
        "ingest writer processes started (more than one per server process: restarts)",
        [],
    ).add_metric([], float(totals["starts"]))
