"""Remote write into a real Prometheus (Debian's /usr/bin/prometheus with its remote-write
receiver on), with an outage in the middle: samples stored through the real write path reach
it each exactly once with their values, a pass while it is down keeps the cursor and the lag
grows past the rule's threshold, and once it is back on the same data directory the shipper
resumes where it stopped. Both database tiers."""

from __future__ import annotations

import time
from typing import Any

from fleet.models import RemoteWriteCursor
from fleet.remote_write.lag import LAG_ALERT_S, kind_lags
from fleet.remote_write.ship import ship_pass
from fleet.storage.rollups import rollup_all
from fleetwatch.remote_write_settings import RemoteWrite
from tests.support import databases, remote_write
from tests.support.databases import TierDb
from tests.support.remote_write import Receiver, gpu_value, small_site, store_gpu_seconds

db = databases.fresh_tier_db  # each test's own database, both tiers

BASE = int(time.time() // 60 * 60) - 3600  # an hour ago, on a minute
GPUS = 2


prometheus = remote_write.prometheus  # a Prometheus receiver per test


def stored_exactly_once(prometheus: Receiver, node_id: int, until: int) -> None:
    """Every GPU temperature sample of [BASE, until) is in Prometheus once, with its value."""
    at = time.time()
    window = int(at - BASE) + 60
    found = prometheus.samples("fleetwatch_raw_gpu_temp_gpu_c", at, window)
    assert len(found) == GPUS
    for labels, samples in found.items():
        gpu = int(dict(label.split("=", 1) for label in labels)["gpu"])
        expected = [
            (float(t), gpu_value("temp_gpu_c", node_id, gpu, t)) for t in range(BASE, until, 5)
        ]
        assert samples == expected
    counts = prometheus.query(f"count_over_time(fleetwatch_raw_gpu_power_w[{window}s])", at)
    assert [float(c["value"][1]) for c in counts] == [len(range(BASE, until, 5))] * GPUS


def test_every_sample_reaches_prometheus_once_across_an_outage(
    db: TierDb, prometheus: Receiver, settings: Any
) -> None:
    config = RemoteWrite(url=prometheus.write_url)
    settings.REMOTE_WRITE = config
    node = small_site(db.alias, GPUS).node.pk
    store_gpu_seconds(db.alias, node, GPUS, BASE, BASE + 300, 5)
    rollup_all(BASE + 330, using=db.alias)

    first = ship_pass(BASE + 330, config, using=db.alias)

    assert first.failed is None
    stored_exactly_once(prometheus, node, BASE + 300)

    # The receiver goes away; ingest goes on.
    prometheus.stop()
    store_gpu_seconds(db.alias, node, GPUS, BASE + 300, BASE + 900, 5)
    rollup_all(BASE + 930, using=db.alias)
    before = RemoteWriteCursor.objects.using(db.alias).get(kind="gpu")

    down = ship_pass(BASE + 930, config, using=db.alias)

    kept = RemoteWriteCursor.objects.using(db.alias).get(kind="gpu")
    assert down.failed is not None and "ConnectionError" in down.failed
    assert (kept.ts, kept.entity, kept.complete_until) == (
        before.ts,
        before.entity,
        before.complete_until,
    )
    lags = {k.kind: k.lag_s for k in kind_lags(BASE + 930, using=db.alias)}
    assert lags["gpu"] == 930 - 300 >= LAG_ALERT_S  # what the rule `remote-write-lag` judges

    # Back on the same data directory: the next pass after the backoff resumes.
    prometheus.start()
    resumed = ship_pass(BASE + 960, config, using=db.alias)

    assert resumed.failed is None
    stored_exactly_once(prometheus, node, BASE + 900)
    assert {k.kind: k.lag_s for k in kind_lags(BASE + 960, using=db.alias)}["gpu"] == 60
