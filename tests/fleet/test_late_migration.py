"""Existing installations upgrade to late-data marks (migration 0015): rollup history is
kept, and a range the old design had marked dirty is rolled up again afterwards, in both
tiers, on both engines."""

from __future__ import annotations

from tests.support import databases
from tests.support.server import FleetServer

server = databases.unmigrated_server  # a server of the test's own, not started, both tiers

T = 1_800_000_000  # an hour boundary
DIRTY_FROM = T - 600  # late data had landed here before the upgrade


def util(t: int) -> float:
    return float(t % 97)


def test_a_dirty_range_marked_before_the_upgrade_is_rolled_up_after_it(
    server: FleetServer,
) -> None:
    server.var_dir.mkdir(parents=True, exist_ok=True)
    server.manage("migrate", "-v0", "fleet", "0014")
    for t in range(T - 1200, T, 10):
        server.execute(
            "INSERT INTO fw_gpu_raw (ts, node_id, gpu, util_gpu_pct) VALUES (?, 1, 0, ?)",
            (float(t), util(t)),
        )
    # Minutes and the hour as the old rollup stored them; the dirty minutes are stale
    # (fewer rows, a wrong max): the late rows arrived after they were computed.
    for minute in range(T - 1200, T, 60):
        n, top = (6, max(util(t) for t in range(minute, minute + 60, 10)))
        if minute >= DIRTY_FROM:
            n, top = 1, -5.0
        server.execute(
            "INSERT INTO fw_gpu_1m (node_id, gpu, bucket, n, util_gpu_pct_max)"
            " VALUES (1, 0, ?, ?, ?)",
            (minute, n, top),
        )
    server.execute(
        "INSERT INTO fw_gpu_1h (node_id, gpu, bucket, n, util_gpu_pct_max)"
        " VALUES (1, 0, ?, 70, -5.0)",
        (T - 3600,),
    )
    server.execute(
        "INSERT INTO fw_rollup_state (tier, kind, done_until, dirty_from) VALUES"
        " ('1m', 'gpu', ?, ?), ('1h', 'gpu', ?, NULL)",
        (T, DIRTY_FROM, T),
    )

    server.manage("migrate", "-v0")

    assert server.query(
        "SELECT tier, done_until, sealed_until, dirty_from FROM fw_rollup_state ORDER BY tier"
    ) == [("1h", T, T, None), ("1m", DIRTY_FROM, DIRTY_FROM, None)]
    assert server.query("SELECT count(*) FROM fw_gpu_1m") == [(20,)]

    server.manage("rollup", "--now", str(T + 30))

    minutes = server.query("SELECT bucket, n, util_gpu_pct_max FROM fw_gpu_1m ORDER BY bucket")
    assert minutes == [
        (m, 6, max(util(t) for t in range(m, m + 60, 10))) for m in range(T - 1200, T, 60)
    ]
    assert server.query("SELECT n, util_gpu_pct_max FROM fw_gpu_1h") == [
        (120, max(util(t) for t in range(T - 1200, T, 10)))
    ]
    assert server.query("SELECT count(*) FROM fw_gpu_late") == [(0,)]


def test_the_upgrade_can_be_rolled_back_with_pending_marks_kept_as_dirty_ranges(
    server: FleetServer,
) -> None:
    server.var_dir.mkdir(parents=True, exist_ok=True)
    server.manage("migrate", "-v0")
    server.execute(
        "INSERT INTO fw_rollup_state (tier, kind, done_until, sealed_until)"
        " VALUES ('1m', 'gpu', ?, ?)",
        (T, T),
    )
    for bucket in (T - 120, T - 600):
        server.execute(
            "INSERT INTO fw_gpu_late (node_id, gpu, tier, bucket) VALUES (1, 0, '1m', ?)",
            (bucket,),
        )
    server.manage("migrate", "-v0", "fleet", "0014")
    assert server.query("SELECT tier, done_until, dirty_from FROM fw_rollup_state") == [
        ("1m", T, T - 600)
    ]
