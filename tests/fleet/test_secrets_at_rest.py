"""An installation with secrets stored in clear (before fleet 0019 / notifications 0005)
upgrades: `migrate` encrypts them, the SLACK_WEBHOOK_URL route drops its copy of the URL,
and neither `manage.py dumpdata` nor a raw dump of the database (SQLite's own dump,
pg_dump) holds any of them in clear — while Fleetwatch still reads them."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess

from fleet.storage.db import pg_conninfo
from fleetwatch.env import database_from_url
from tests.support import databases
from tests.support.server import FleetServer

WEBHOOK = "https://hooks.slack.com/services/T0AAAA/B0BBBB/routewebhooksecret"
ENV_WEBHOOK = "https://hooks.slack.com/services/T0AAAA/B0CCCC/environmentsecret"
TOKEN = "prometheusbearersecret"
PASSWORD = "prometheuspasswordsecret"
SECRETS = ("routewebhooksecret", "environmentsecret", "prometheusbearersecret", PASSWORD)

BEFORE = '[("fleet", "0018_source_cadence"), ("notifications", "0004_delivery_kind_recovered")]'
# Rows written through the models as they were before encryption (historical models).
SEED = f"""
from django.db import connection
from django.db.migrations.loader import MigrationLoader
apps = MigrationLoader(connection).project_state({BEFORE}).apps
site = apps.get_model("fleet", "Site").objects.create(slug="lon1", name="London")
apps.get_model("fleet", "PrometheusSource").objects.create(
    name="dc1", site=site, url="http://prom:9090", bearer_token={TOKEN!r},
    basic_user="reader", basic_password={PASSWORD!r})
Route = apps.get_model("notifications", "Route")
Route.objects.create(name="ops", webhook_url={WEBHOOK!r})
Route.objects.create(name="SLACK_WEBHOOK_URL", webhook_url={ENV_WEBHOOK!r},
    from_environment=True, min_severity="info")
"""
READ = """
from fleet.models import PrometheusSource
from fleet.notifications.models import Route
source = PrometheusSource.objects.get()
print(Route.objects.get(name="ops").webhook_url, source.bearer_token, source.basic_password)
"""


server = databases.unmigrated_server  # a server of the test's own, not started


def raw_dump(server: FleetServer) -> str:
    """Every row of every table, as the database itself dumps them."""
    if server.database_url:
        conninfo = pg_conninfo(database_from_url(server.database_url))
        out = subprocess.run(
            ["pg_dump", "--data-only", "--dbname", conninfo],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
            env={**os.environ, "PGCONNECT_TIMEOUT": "5"},
        )
        return out.stdout
    with contextlib.closing(sqlite3.connect(server.var_dir / "fleetwatch.sqlite3")) as conn:
        return "\n".join(conn.iterdump())


def test_migrate_encrypts_secrets_stored_in_clear_and_no_dump_holds_them(
    server: FleetServer,
) -> None:
    server.var_dir.mkdir(parents=True, exist_ok=True)
    server.manage("migrate", "-v0", "fleet", "0018_source_cadence")
    server.manage("migrate", "-v0", "notifications", "0004_delivery_kind_recovered")
    server.manage("shell", "-c", SEED)
    assert "routewebhooksecret" in raw_dump(server)  # the dump does see clear text

    server.manage("migrate", "-v0")

    dumps = {"dumpdata": server.manage("dumpdata"), "raw": raw_dump(server)}
    for kind, dump in dumps.items():
        found = [s for s in SECRETS if s in dump]
        assert found == [], f"{kind} holds {found}"
    read = server.manage("shell", "-c", READ).splitlines()[-1]  # after shell's own note
    assert read.split() == [WEBHOOK, TOKEN, PASSWORD]
    columns = server.query("SELECT webhook_url, environment_fingerprint FROM notifications_route")
    assert sorted(c[0][:7] for c in columns) == ["", "fernet:"]
    assert all(len(c[1]) == 64 for c in columns if not c[0])
