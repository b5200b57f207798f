"""History pages' read-back from the TSDB (fleet/read/history_remote.py): a range older than
local raw retention is answered from a real Prometheus (the samples remote write stored
there) as bucket means, minima and maxima of the raw samples; a range inside raw retention
never asks it; a TSDB that is down leaves the range to the rollups, and the answer says so."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fleet.read.history import history
from fleet.read.history_remote import MAX_TSDB_POINTS, TSDB, tsdb_step
from fleet.remote_write import client, series
from fleet.remote_write.wire import compress, encode_write_request
from fleetwatch.remote_write_settings import RemoteWrite
from tests.support import databases, remote_write
from tests.support.databases import TierDb
from tests.support.remote_write import Receiver, StatusReceiver, gpu_value, small_site

db = databases.fresh_tier_db  # each test's own database, both tiers

NOW = time.time()
OLD = int(NOW // 60 * 60) - 5 * 3600  # five hours ago: past the 3 h of raw retention
EVERY = 5
SPAN = 600


prometheus = remote_write.prometheus  # a Prometheus receiver per test


def shipped_long_ago(prometheus: Receiver, db: TierDb, settings: Any) -> int:
    """GPU 0's temperature over ten minutes five hours ago, in the TSDB only; the node id."""
    node = small_site(db.alias, 1).node.pk
    place = series.labels_of("gpu", (node, 0), series.entity_labels("gpu", db.alias))
    labels = series.series_labels("gpu", "temp_gpu_c", place)
    samples = [
        (t * 1000, gpu_value("temp_gpu_c", node, 0, t)) for t in range(OLD, OLD + SPAN, EVERY)
    ]
    config = RemoteWrite(url=prometheus.write_url, read_url=prometheus.url)
    answer = client.post(config, compress(encode_write_request([(labels, samples)])))
    assert answer.outcome is client.Outcome.STORED, answer
    settings.REMOTE_WRITE = config
    return node


def test_a_range_older_than_raw_retention_is_read_from_the_tsdb(
    db: TierDb, prometheus: Receiver, settings: Any
) -> None:
    node = shipped_long_ago(prometheus, db, settings)

    answer = history("gpu", (node, 0), ["temp_gpu_c"], OLD, OLD + SPAN, 11, now=NOW, using=db.alias)

    assert answer.tier == TSDB and answer.step_s == 60 and answer.note == ""
    temps = answer.series["temp_gpu_c"]
    minutes = [OLD + 60 * k for k in range(SPAN // 60)]
    each = {
        m: [gpu_value("temp_gpu_c", node, 0, t) for t in range(m, m + 60, EVERY)] for m in minutes
    }
    assert [b for b, _ in temps.points] == minutes
    assert [v for _, v in temps.points] == pytest.approx([sum(v) / len(v) for v in each.values()])
    assert temps.min == [min(v) for v in each.values()]
    assert temps.max == [max(v) for v in each.values()]


def test_a_range_inside_raw_retention_never_asks_the_tsdb(
    db: TierDb, prometheus: Receiver, settings: Any
) -> None:
    node = shipped_long_ago(prometheus, db, settings)

    answer = history("gpu", (node, 0), ["temp_gpu_c"], NOW - 600, NOW, 11, now=NOW, using=db.alias)

    assert answer.tier == "raw" and answer.note == ""


def test_a_tsdb_that_is_down_leaves_the_range_to_the_rollups_and_says_so(
    db: TierDb, prometheus: Receiver, settings: Any
) -> None:
    node = shipped_long_ago(prometheus, db, settings)
    prometheus.stop()

    answer = history("gpu", (node, 0), ["temp_gpu_c"], OLD, OLD + SPAN, 11, now=NOW, using=db.alias)

    assert answer.tier == "1m"
    assert answer.note.startswith("the TSDB did not answer (")
    assert answer.as_json()["note"] == answer.note


def test_a_read_carries_the_configured_tenant(db: TierDb, settings: Any) -> None:
    # A multi-tenant Mimir answers a query only within the tenant's header, as it takes writes.
    node = small_site(db.alias, 1).node.pk
    tsdb = StatusReceiver()
    try:
        settings.REMOTE_WRITE = RemoteWrite(url=tsdb.url, read_url=tsdb.base, tenant="gpu-fleet")

        answer = history(
            "gpu", (node, 0), ["temp_gpu_c"], OLD, OLD + SPAN, 11, now=NOW, using=db.alias
        )
    finally:
        tsdb.close()

    assert answer.tier == TSDB and tsdb.queries
    assert {q.get("X-Scope-OrgID") for q in tsdb.queries} == {"gpu-fleet"}


def test_the_step_keeps_a_range_within_the_points_a_chart_and_prometheus_take() -> None:
    day, month = 86400.0, 30 * 86400.0
    assert tsdb_step(0, day, 600) == 145  # a day in 600 points
    assert month / tsdb_step(0, month, 5000) <= 5000
    assert tsdb_step(0, 10 * month, 5000) * MAX_TSDB_POINTS >= 10 * month
