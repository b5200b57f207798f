"""Secrets at rest (fleet/secrets.py): Slack webhook URLs and Prometheus credentials are
stored encrypted, read back in plain, survive a key rotation, and a missing or retired
key is an error that names FLEETWATCH_SECRET_KEYS — in the admin, in a delivery, in a
pull — never a crash and never the secret. (Dumps and the upgrade of an existing
database: test_secrets_at_rest.py.)"""

from __future__ import annotations

import io
import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from fleet.ingest.prometheus.pull import pull_source
from fleet.models import PrometheusSource, Site
from fleet.notifications.delivery import attempt
from fleet.notifications.models import Delivery, Route
from fleet.notifications.slack import SlackWebhook
from fleet.secrets import SETTING, SecretKeyMissing, SecretUnreadable, check_stored_secrets
from fleetwatch.secret_keys import local_key, parse_keys
from tests.support.slack_receiver import SlackReceiver

pytestmark = pytest.mark.django_db

OLD_KEY = Fernet.generate_key().decode()
NEW_KEY = Fernet.generate_key().decode()
WEBHOOK = "https://hooks.slack.com/services/T0AAAA/B0BBBB/webhooksecretpart"
TOKEN = "bearer-token-secret-part"


@pytest.fixture(autouse=True)
def old_key(settings: Any) -> None:
    settings.FLEETWATCH_SECRET_KEYS = [OLD_KEY]
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def slack() -> Iterator[SlackReceiver]:
    with SlackReceiver() as receiver:
        yield receiver


def stored(table: str, column: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def source(**fields: Any) -> PrometheusSource:
    site = Site.objects.create(slug="lon1", name="London")
    return PrometheusSource.objects.create(
        name="dc1", site=site, url="http://127.0.0.1:9", **fields
    )


# -- stored encrypted, read in plain -------------------------------------------


def test_a_webhook_url_is_stored_encrypted_and_read_back_in_plain() -> None:
    route = Route.objects.create(name="ops", webhook_url=WEBHOOK)
    (column,) = stored("notifications_route", "webhook_url")
    assert column.startswith("fernet:") and "webhooksecretpart" not in column
    assert Route.objects.get(pk=route.pk).webhook_url == WEBHOOK


def test_prometheus_credentials_are_stored_encrypted_and_an_empty_one_stays_empty() -> None:
    pulled = source(bearer_token=TOKEN, basic_user="reader", basic_password="")
    assert stored("fleet_prometheussource", "bearer_token")[0].startswith("fernet:")
    assert stored("fleet_prometheussource", "basic_password") == [""]
    again = PrometheusSource.objects.get(pk=pulled.pk)
    assert again.bearer_token == TOKEN and again.basic_password == ""


def test_saving_other_fields_keeps_the_secret_as_stored_and_needs_no_key(settings: Any) -> None:
    Route.objects.create(name="ops", webhook_url=WEBHOOK)
    before = stored("notifications_route", "webhook_url")
    settings.FLEETWATCH_SECRET_KEYS = []
    route = Route.objects.get(name="ops")
    route.min_severity = "critical"
    route.save()
    assert stored("notifications_route", "webhook_url") == before


def test_dumpdata_writes_the_token_and_loaddata_reads_it_back(tmp_path: Path) -> None:
    Route.objects.create(name="ops", webhook_url=WEBHOOK)
    out = io.StringIO()
    call_command("dumpdata", "notifications.route", stdout=out)
    assert "webhooksecretpart" not in out.getvalue()
    Route.objects.all().delete()
    dump = tmp_path / "routes.json"
    dump.write_text(out.getvalue())
    call_command("loaddata", str(dump), verbosity=0)
    assert Route.objects.get(name="ops").webhook_url == WEBHOOK
    assert json.loads(out.getvalue())[0]["fields"]["webhook_url"].startswith("fernet:")
    assert stored("notifications_route", "webhook_url")[0].startswith("fernet:")


# -- keys: rotation, missing, retired ------------------------------------------


def test_rotation_reads_old_secrets_then_rewrites_them_under_the_new_key(settings: Any) -> None:
    Route.objects.create(name="ops", webhook_url=WEBHOOK)
    source(bearer_token=TOKEN)
    settings.FLEETWATCH_SECRET_KEYS = [NEW_KEY, OLD_KEY]
    assert Route.objects.get().webhook_url == WEBHOOK  # the old key still reads
    out = io.StringIO()
    call_command("rotate_secrets", stdout=out)
    assert "Slack routes: 1 secrets re-encrypted" in out.getvalue()
    settings.FLEETWATCH_SECRET_KEYS = [NEW_KEY]  # the old key retired
    assert Route.objects.get().webhook_url == WEBHOOK
    assert PrometheusSource.objects.get().bearer_token == TOKEN


def test_rotating_with_a_secret_no_key_reads_changes_nothing(settings: Any) -> None:
    Route.objects.create(name="ops", webhook_url=WEBHOOK)
    Route.objects.create(name="lon", webhook_url=WEBHOOK + "2")
    before = stored("notifications_route", "webhook_url")
    settings.FLEETWATCH_SECRET_KEYS = [NEW_KEY]
    with pytest.raises(CommandError, match=f"not in {SETTING}.*nothing was changed"):
        call_command("rotate_secrets")
    assert stored("notifications_route", "webhook_url") == before


def test_storing_a_secret_without_a_key_is_an_error_naming_the_setting(settings: Any) -> None:
    settings.FLEETWATCH_SECRET_KEYS = []
    with pytest.raises(SecretKeyMissing, match=f"{SETTING} is not set"), transaction.atomic():
        Route.objects.create(name="ops", webhook_url=WEBHOOK)
    assert not Route.objects.exists()


def test_a_secret_under_a_retired_key_is_an_error_naming_the_setting(settings: Any) -> None:
    Route.objects.create(name="ops", webhook_url=WEBHOOK)
    settings.FLEETWATCH_SECRET_KEYS = [NEW_KEY]
    route = Route.objects.get()  # the row still loads
    with pytest.raises(SecretUnreadable, match=f"not in {SETTING}"):
        route.webhook_url  # noqa: B018
    assert route.webhook_shown() == f"unreadable: no key for it in {SETTING}"


def test_the_database_check_names_each_secret_no_key_reads(settings: Any) -> None:
    route = Route.objects.create(name="ops", webhook_url=WEBHOOK)
    assert check_stored_secrets(databases=["default"]) == []
    settings.FLEETWATCH_SECRET_KEYS = [NEW_KEY]
    (error,) = check_stored_secrets(databases=["default"])
    assert error.id == "fleet.E201" and f"Slack route {route.pk}, webhook_url" in error.msg
    assert SETTING in error.msg and "webhooksecretpart" not in error.msg


def test_a_malformed_key_is_refused_when_the_settings_load() -> None:
    with pytest.raises(ImproperlyConfigured, match=f"{SETTING}: key 2 is not a Fernet key"):
        parse_keys(f"{NEW_KEY}, not-a-key")
    assert parse_keys(f" {NEW_KEY} ,{OLD_KEY}") == [NEW_KEY, OLD_KEY]


def test_the_demo_makes_its_key_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "var" / "secret-key"
    key = local_key(path)
    assert local_key(path) == key and parse_keys(key) == [key]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret-key"]


# -- what a retired key does to a delivery and a pull --------------------------


def test_a_route_whose_key_is_retired_fails_its_delivery_with_a_clear_reason(
    settings: Any, slack: SlackReceiver
) -> None:
    settings.SLACK_WEBHOOK_URL = ""
    route = Route.objects.create(name="ops", webhook_url=slack.url("/ops"))
    delivery = Delivery.objects.create(
        route=route, kind="firing", severity="critical", title="GPU hot", message={"text": "x"}
    )
    settings.FLEETWATCH_SECRET_KEYS = [NEW_KEY]
    assert attempt(delivery.pk, SlackWebhook()).retry_in is None
    delivery.refresh_from_db()
    route = Route.objects.get(pk=route.pk)
    assert delivery.state == Delivery.FAILED and SETTING in delivery.last_error
    assert route.state == Route.FAILING and SETTING in route.failing_reason
    assert slack.received() == []


def test_a_prometheus_source_whose_key_is_retired_is_down_with_a_clear_reason(
    settings: Any,
) -> None:
    pulled = source(bearer_token=TOKEN)
    settings.FLEETWATCH_SECRET_KEYS = [NEW_KEY]
    pull_source(PrometheusSource.objects.get(pk=pulled.pk))
    again = PrometheusSource.objects.get(pk=pulled.pk)
    assert again.last_status == "down" and SETTING in again.last_error


# -- SLACK_WEBHOOK_URL stays in the environment --------------------------------


def test_the_slack_webhook_url_route_keeps_no_url_in_the_database(settings: Any) -> None:
    from fleet.notifications.delivery import routes_for

    settings.SLACK_WEBHOOK_URL = WEBHOOK
    (route,) = routes_for(None, "critical")
    assert route.post_url == WEBHOOK
    assert stored("notifications_route", "webhook_url") == [""]
    assert "webhooksecretpart" not in stored("notifications_route", "environment_fingerprint")[0]


# -- the admin -----------------------------------------------------------------


def route_form(**changes: str) -> dict[str, str]:
    return {"name": "ops", "webhook_url": "", "min_severity": "warning", "enabled": "on"} | changes


def test_the_route_page_never_shows_the_url_an_empty_field_keeps_it_a_new_one_replaces_it(
    admin_client: Client,
) -> None:
    route = Route.objects.create(name="ops", webhook_url=WEBHOOK)
    url = reverse("admin:notifications_route_change", args=[route.pk])
    page = admin_client.get(url).content.decode()
    assert "webhooksecretpart" not in page and "hooks.slack.com …part (stored encrypted)" in page
    assert admin_client.post(url, route_form(min_severity="critical")).status_code == 302
    assert Route.objects.get().webhook_url == WEBHOOK
    new = "https://hooks.slack.com/services/T0AAAA/B0CCCC/anothersecret"
    assert admin_client.post(url, route_form(webhook_url=new)).status_code == 302
    assert Route.objects.get().webhook_url == new
    listing = admin_client.get(reverse("admin:notifications_route_changelist")).content.decode()
    assert "anothersecret" not in listing and "hooks.slack.com …cret" in listing


def test_adding_a_route_without_a_key_is_a_form_error_and_saves_nothing(
    admin_client: Client, settings: Any
) -> None:
    settings.FLEETWATCH_SECRET_KEYS = []
    answer = admin_client.post(
        reverse("admin:notifications_route_add"), route_form(webhook_url=WEBHOOK)
    )
    assert answer.status_code == 200 and f"{SETTING} is not set" in answer.content.decode()
    assert not Route.objects.exists()


def test_keeping_a_secret_no_key_reads_is_a_form_error_asking_for_it_again(
    admin_client: Client, settings: Any
) -> None:
    route = Route.objects.create(name="ops", webhook_url=WEBHOOK)
    settings.FLEETWATCH_SECRET_KEYS = [NEW_KEY]
    url = reverse("admin:notifications_route_change", args=[route.pk])
    assert "unreadable: no key for it" in admin_client.get(url).content.decode()
    answer = admin_client.post(url, route_form(min_severity="critical"))
    assert answer.status_code == 200 and "enter the secret again" in answer.content.decode()
    new = "https://hooks.slack.com/services/T0AAAA/B0CCCC/anothersecret"
    assert admin_client.post(url, route_form(webhook_url=new)).status_code == 302
    assert Route.objects.get().webhook_url == new


def test_the_slack_webhook_url_route_shows_its_url_shortened_and_not_editable(
    admin_client: Client, settings: Any
) -> None:
    from fleet.notifications.delivery import environment_route

    settings.SLACK_WEBHOOK_URL = WEBHOOK
    route = environment_route()
    assert route is not None
    page = admin_client.get(reverse("admin:notifications_route_change", args=[route.pk]))
    text = page.content.decode()
    assert "hooks.slack.com …part" in text and 'name="webhook_url"' not in text
