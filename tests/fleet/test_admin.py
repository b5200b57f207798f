"""The admin: every inventory page renders, tokens are shown once and can be revoked."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import (
    GPU,
    CoolingLoop,
    EnrollmentToken,
    Event,
    FacilityMeter,
    Hall,
    Node,
    PowerFeed,
    Rack,
    Site,
    SourceToken,
    hash_token,
)
from tests.support import people

INVENTORY_MODELS: tuple[type[Model], ...] = (
    Site,
    Hall,
    Rack,
    PowerFeed,
    CoolingLoop,
    FacilityMeter,
    Node,
    GPU,
    EnrollmentToken,
    SourceToken,
    Event,
)
# Issued by enrolment and recorded from agents, never typed in by hand.
NOT_ADDABLE = (SourceToken, Event)

pytestmark = pytest.mark.django_db


fast_passwords = people.fast_passwords  # autouse


@pytest.fixture
def site() -> Site:
    # A01, A02 with the figures these tests read (not the demo's current sizing).
    racks = tuple(replace(plan, nodes=2, budget_kw=130, feed_amps=125) for plan in DEMO_RACKS[:2])
    site = seed_demo_site("demo", racks, gpus_per_node=2)
    EnrollmentToken.issue(site, label="rollout")
    SourceToken.objects.create(
        source="node:gpu-a01-01",
        kind="node",
        site=site,
        token_hash=hash_token("fws_secret"),
        last_seq=41,
        last_seen=time.time(),
        agent_stats={"spool_depth": 3},
    )
    Event.objects.create(
        source="node:gpu-a01-01", seq=41, pos=0, ts=time.time(), kind="xid", code=79
    )
    return site


def url(model: type[Model], view: str, *args: Any) -> str:
    return reverse(f"admin:fleet_{model._meta.model_name}_{view}", args=args)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.mark.parametrize("model", INVENTORY_MODELS, ids=lambda m: m.__name__)
def test_list_page_renders_and_links_to_its_entries(
    admin_client: Client, site: Site, model: type[Model]
) -> None:
    obj = model._default_manager.first()
    assert obj is not None
    response = admin_client.get(url(model, "changelist"))
    assert response.status_code == 200
    assert url(model, "change", obj.pk) in response.content.decode()


@pytest.mark.parametrize("model", INVENTORY_MODELS, ids=lambda m: m.__name__)
def test_change_page_renders(admin_client: Client, site: Site, model: type[Model]) -> None:
    obj = model._default_manager.first()
    assert obj is not None
    assert admin_client.get(url(model, "change", obj.pk)).status_code == 200


@pytest.mark.parametrize("model", INVENTORY_MODELS, ids=lambda m: m.__name__)
def test_add_page_renders_unless_entries_come_from_agents(
    admin_client: Client, site: Site, model: type[Model]
) -> None:
    expected = 403 if model in NOT_ADDABLE else 200
    assert admin_client.get(url(model, "add")).status_code == expected


def test_rack_list_shows_budget_and_primary_feed_capacity(admin_client: Client, site: Site) -> None:
    page = admin_client.get(url(Rack, "changelist")).content.decode()
    # Demo racks A01/A02: 130 kW budget on two 125 A three-phase feeds.
    assert "130.0 kW" in page
    assert "143.8 kW" in page


def test_site_list_shows_the_pue_category_its_meters_allow(
    admin_client: Client, site: Site
) -> None:
    page = admin_client.get(url(Site, "changelist")).content.decode()
    assert '<td class="field-pue_category">2</td>' in page


# Enrolment tokens -------------------------------------------------------------------------


def add_enrollment_token(client: Client, site: Site) -> Any:
    return client.post(
        url(EnrollmentToken, "add"),
        {"site": site.pk, "label": "new rack row", "expires_0": "", "expires_1": ""},
        follow=True,
    )


def test_new_enrolment_token_is_shown_once_and_stored_hashed(
    admin_client: Client, site: Site
) -> None:
    response = add_enrollment_token(admin_client, site)
    (message,) = [m for m in messages_of(response) if "Enrolment token" in m]
    plain = message.split(": ", 1)[1].split(" ")[0]
    assert plain.startswith("fwe_")
    assert plain in response.content.decode()
    token = EnrollmentToken.objects.get(label="new rack row")
    assert token.token_hash == hash_token(plain)
    # Shown once: neither the list nor the token's own page can show it again.
    assert plain not in admin_client.get(url(EnrollmentToken, "changelist")).content.decode()
    assert plain not in admin_client.get(url(EnrollmentToken, "change", token.pk)).content.decode()


def test_editing_an_enrolment_token_keeps_its_hash_and_shows_no_secret(
    admin_client: Client, site: Site
) -> None:
    token = EnrollmentToken.objects.get()
    response = admin_client.post(
        url(EnrollmentToken, "change", token.pk),
        {"site": site.pk, "label": "renamed", "expires_0": "", "expires_1": ""},
        follow=True,
    )
    assert not [m for m in messages_of(response) if "Enrolment token" in m]
    assert EnrollmentToken.objects.get(pk=token.pk).token_hash == token.token_hash
    assert EnrollmentToken.objects.get(pk=token.pk).label == "renamed"


def test_token_hash_is_never_a_form_field(admin_client: Client, site: Site) -> None:
    token = SourceToken.objects.get()
    add_page = admin_client.get(url(EnrollmentToken, "add")).content.decode()
    change_page = admin_client.get(url(SourceToken, "change", token.pk)).content.decode()
    assert 'name="token_hash"' not in add_page
    assert 'name="token_hash"' not in change_page
    assert token.token_hash not in change_page  # only a short fingerprint is shown
    assert token.token_hash[:8] in change_page


def revoke(client: Client, model: type[Model], pks: list[int]) -> Any:
    return client.post(
        url(model, "changelist"),
        {"action": "revoke_tokens", "_selected_action": pks},
        follow=True,
    )


def test_revoke_action_makes_enrolment_tokens_unusable(admin_client: Client, site: Site) -> None:
    kept, _ = EnrollmentToken.issue(site, label="kept")
    token = EnrollmentToken.objects.get(label="rollout")
    response = revoke(admin_client, EnrollmentToken, [token.pk])
    assert "1 token revoked" in messages_of(response)
    assert not EnrollmentToken.objects.get(pk=token.pk).usable()
    assert EnrollmentToken.objects.get(pk=kept.pk).usable()


def test_revoke_action_revokes_source_tokens(admin_client: Client, site: Site) -> None:
    token = SourceToken.objects.get()
    revoke(admin_client, SourceToken, [token.pk])
    assert SourceToken.objects.get(pk=token.pk).revoked


# Live fields ------------------------------------------------------------------------------


def test_source_token_page_shows_what_the_agent_last_sent_read_only(
    admin_client: Client, site: Site
) -> None:
    token = SourceToken.objects.get()
    page = admin_client.get(url(SourceToken, "change", token.pk)).content.decode()
    assert "41" in page
    assert "spool_depth" in page
    for name in ("last_seq", "last_seen", "agent_stats", "source"):
        assert f'name="{name}"' not in page
    assert 'name="revoked"' in page


def test_source_token_list_shows_each_agents_clock_offset(admin_client: Client, site: Site) -> None:
    token = SourceToken.objects.get()
    token.agent_stats = {"clock_offset_s": 0.25}
    token.save()
    assert "0.250 s behind" in admin_client.get(url(SourceToken, "changelist")).content.decode()
    token.agent_stats = {"clock_offset_s": -2.0}
    token.save()
    page = admin_client.get(url(SourceToken, "changelist")).content.decode()
    assert "⚠ 2.000 s ahead" in page
    token.agent_stats = {}
    token.save()
    assert "not measured" in admin_client.get(url(SourceToken, "changelist")).content.decode()


def test_editing_a_source_token_cannot_change_what_ingest_recorded(
    admin_client: Client, site: Site
) -> None:
    token = SourceToken.objects.get()
    admin_client.post(
        url(SourceToken, "change", token.pk),
        {"revoked": "on", "last_seq": "0", "agent_stats": "{}", "source": "node:other"},
    )
    stored = SourceToken.objects.get(pk=token.pk)
    assert stored.revoked
    assert (stored.source, stored.last_seq, stored.agent_stats) == (
        "node:gpu-a01-01",
        41,
        {"spool_depth": 3},
    )


# Racks ------------------------------------------------------------------------------------


def new_rack_form(site: Site, budget_kw: float, *feed_amps: int) -> dict[str, Any]:
    hall = site.halls.get(name="Hall A")
    data: dict[str, Any] = {
        "hall": hall.pk,
        "name": "A09",
        "cooling": "air",
        "power_budget_kw": budget_kw,
        "position": 9,
        "loop": "",
        "nodes-TOTAL_FORMS": 0,
        "nodes-INITIAL_FORMS": 0,
        "feeds-TOTAL_FORMS": len(feed_amps),
        "feeds-INITIAL_FORMS": 0,
    }
    for i, amps in enumerate(feed_amps):
        data |= {
            f"feeds-{i}-name": "AB"[i],
            f"feeds-{i}-type": "primary",
            f"feeds-{i}-phase": "three",
            f"feeds-{i}-voltage": 415,
            f"feeds-{i}-amperage": amps,
            f"feeds-{i}-max_utilization": 80,
        }
    return data


def test_new_rack_whose_budget_exceeds_the_feeds_entered_with_it_is_refused(
    admin_client: Client, site: Site
) -> None:
    response = admin_client.post(url(Rack, "add"), new_rack_form(site, 100, 63, 63))
    assert response.status_code == 200  # the form again, with the error
    assert "budget 100 kW exceeds these primary feeds&#x27; 72.5 kW" in response.content.decode()
    assert not Rack.objects.filter(name="A09").exists()


def test_new_rack_within_its_feeds_is_saved_with_them(admin_client: Client, site: Site) -> None:
    response = admin_client.post(url(Rack, "add"), new_rack_form(site, 70, 63, 63))
    assert response.status_code == 302
    rack = Rack.objects.get(name="A09")
    assert rack.feeds.count() == 2
    assert rack.feed_capacity_kw() == pytest.approx(72.5, abs=0.05)


def test_gpus_an_agent_discovered_are_listed_for_an_admin_to_accept(
    admin_client: Client, site: Site
) -> None:
    node = Node.objects.filter(rack__hall__site=site).first()
    assert node is not None
    found = GPU.objects.create(node=node, index=9, discovered_at=dt.datetime.now(dt.UTC))
    awaiting = admin_client.get(url(GPU, "changelist") + "?inventory=awaiting")
    assert f"{node.name}/gpu9" in awaiting.content.decode()
    assert "awaiting acceptance" in awaiting.content.decode()
    assert f"{node.name}/gpu0" not in awaiting.content.decode()  # the inventory's own
    response = admin_client.post(
        url(GPU, "changelist"),
        {"action": "accept_gpus", "_selected_action": [found.pk]},
        follow=True,
    )
    assert "1 GPU(s) accepted into the inventory." in messages_of(response)
    found.refresh_from_db()
    assert found.accepted_at is not None and found.accepted_by == "admin"
    assert (
        f"{node.name}/gpu9"
        not in admin_client.get(url(GPU, "changelist") + "?inventory=awaiting").content.decode()
    )
