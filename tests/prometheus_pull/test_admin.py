"""Prometheus sources in the admin: secrets are never shown back, an empty field keeps
them, and the unmatched series and pulled GPUs are listed."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from fleet.models import GPU, Hall, Node, PrometheusSource, PulledGPU, Rack, Site, UnmatchedSeries
from tests.support import people

pytestmark = pytest.mark.django_db

SECRET = "s3cret-bearer-token-value"


fast_passwords = people.fast_passwords  # autouse


@pytest.fixture
def source() -> PrometheusSource:
    site = Site.objects.create(slug="adm", name="Admin site")
    rack = Rack.objects.create(
        hall=Hall.objects.create(site=site, name="H"), name="A01", power_budget_kw=40
    )
    gpu = GPU.objects.create(node=Node.objects.create(name="gpu-x-01", rack=rack), index=0)
    source = PrometheusSource.objects.create(
        name="dc1", site=site, url="http://prom.example:9090", bearer_token=SECRET
    )
    PulledGPU.objects.create(source=source, gpu=gpu, first_pulled=1e9, last_pulled=1e9)
    UnmatchedSeries.objects.create(
        source=source,
        identity="gpu-z99-01/gpu0/GPU-x",
        reason="host gpu-z99-01 is not a node of this site",
        labels={"Hostname": "gpu-z99-01", "gpu": "0"},
        metrics=23,
        first_seen=1e9,
        last_seen=1e9,
    )
    return source


def form_data(source: PrometheusSource, **changes: str) -> dict[str, str]:
    data = {
        "name": source.name,
        "site": str(source.site_id),
        "url": source.url,
        "enabled": "on",
        "selector": "",
        "lookback_s": "60",
        "bearer_token": "",
        "basic_user": "",
        "basic_password": "",
        "verify_tls": "on",
        "host_labels": "Hostname,hostname",
        "instance_map": "{}",
    }
    return data | changes


def test_the_source_page_never_shows_the_token_and_an_empty_field_keeps_it(
    admin_client: Client, source: PrometheusSource
) -> None:
    url = reverse("admin:fleet_prometheussource_change", args=[source.pk])
    page = admin_client.get(url)
    assert page.status_code == 200 and SECRET not in page.content.decode()
    assert "stored (not shown)" in page.content.decode()
    answer = admin_client.post(url, form_data(source, selector='job="dcgm"'))
    assert answer.status_code == 302
    source.refresh_from_db()
    assert source.bearer_token == SECRET and source.selector == 'job="dcgm"'
    admin_client.post(url, form_data(source, clear_secrets="on"))
    source.refresh_from_db()
    assert source.bearer_token == ""


def test_the_source_list_and_the_unmatched_series_are_listed(
    admin_client: Client, source: PrometheusSource
) -> None:
    listing = admin_client.get(reverse("admin:fleet_prometheussource_changelist"))
    assert listing.status_code == 200 and "dc1" in listing.content.decode()
    unmatched = admin_client.get(reverse("admin:fleet_unmatchedseries_changelist"))
    assert "gpu-z99-01" in unmatched.content.decode()
    row = UnmatchedSeries.objects.get()
    detail = admin_client.get(reverse("admin:fleet_unmatchedseries_change", args=[row.pk]))
    assert "not a node of this site" in detail.content.decode()
    pulled = admin_client.get(reverse("admin:fleet_pulledgpu_changelist"))
    assert "gpu-x-01" in pulled.content.decode()
