"""The cast of the role tests (fleet/access.py): people with roles at sites, signed in;
sites "Demo datacentre" (racks A01, A02) and "North" (rack N01), a fixture a module binds
to the name its tests take (`sites = roles.demo_and_north`); an alert firing at a rack."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from fleet.alerts.models import AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Hall, Rack, Site, SiteRole


@pytest.fixture
def demo_and_north() -> tuple[Site, Site]:
    """Site Demo (racks A01, A02) and site North (rack N01)."""
    demo = seed_demo_site("demo", tuple(replace(p, nodes=1) for p in DEMO_RACKS[:2]), 1)
    north = Site.objects.create(slug="north", name="North")
    hall = Hall.objects.create(site=north, name="Hall N")
    Rack.objects.create(hall=hall, name="N01", power_budget_kw=40)
    return demo, north


def person(name: str, *, groups: tuple[str, ...] = (), **at_sites: str) -> User:
    """A user in `groups`, with a SiteRole per `slug=role`."""
    user = User.objects.create_user(name, password="pw")
    for group in groups:
        user.groups.add(Group.objects.get(name=group))
    for slug, role in at_sites.items():
        SiteRole.objects.create(user=user, site=Site.objects.get(slug=slug), role=role)
    return user


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def firing(site: Site, rack: str) -> AlertInstance:
    now = timezone.now()
    return AlertInstance.objects.create(
        rule=AlertRule.objects.get(key="gpu-hw-thermal-slowdown"),
        scope="gpu",
        entity=f"{rack}:0",
        state="firing",
        value=1.0,
        labels={"site": site.name, "rack": rack, "node": f"gpu-{rack.lower()}", "gpu": "0"},
        site=site,
        started_at=now,
        fired_at=now,
        updated_at=now,
    )


def rack_url(name: str) -> str:
    return f"/racks/{Rack.objects.get(name=name).pk}/"
