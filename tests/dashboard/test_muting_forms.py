"""Silences and maintenance windows from the dashboard: an operator adds them and is
their author; a typo is shown next to its field and nothing is saved; viewers get 403;
a form without its CSRF token is refused; a silence ends early from the alerts page."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from fleet.alerts.models import AlertInstance, AlertRule, MaintenanceWindow, Silence
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Hall, Rack, Site, SiteRole
from tests.support import people

pytestmark = pytest.mark.django_db

SILENCE = "/alerts/silences/new"
MAINTENANCE = "/alerts/maintenance/new"


fast_passwords = people.fast_passwords  # autouse


@pytest.fixture
def demo() -> Site:
    return seed_demo_site("demo", tuple(replace(p, nodes=1) for p in DEMO_RACKS[:2]), 1)


@pytest.fixture
def north() -> Site:
    site = Site.objects.create(slug="north", name="North")
    Rack.objects.create(
        hall=Hall.objects.create(site=site, name="N"), name="N01", power_budget_kw=40
    )
    return site


def member(name: str, group: str, client: Client | None = None) -> Client:
    user = User.objects.create_user(name, password="pw")
    user.groups.add(Group.objects.get(name=group))
    client = client or Client()
    client.force_login(user)
    return client


def silence_post(**overrides: str) -> dict[str, str]:
    return {
        "matchers": "rack=A01\nrule=~gpu-.*",
        "duration": "2h",
        "comment": "fan swap, CHG-1234",
        **overrides,
    }


def test_an_operator_adds_a_silence_from_typed_lines_and_is_its_author(demo: Site) -> None:
    answer = member("dana", "Operators").post(SILENCE, silence_post(), follow=True)
    silence = Silence.objects.get()
    assert silence.created_by == "dana" and silence.comment == "fan swap, CHG-1234"
    assert silence.matchers == [
        {"label": "rack", "op": "=", "value": "A01"},
        {"label": "rule", "op": "=~", "value": "gpu-.*"},
    ]
    assert dt.timedelta(hours=2) == silence.ends_at - silence.starts_at
    assert f"Silence {silence.pk} added" in answer.content.decode()


def test_a_bad_matcher_is_shown_at_its_field_and_nothing_is_saved(demo: Site) -> None:
    operator = member("dana", "Operators")
    answer = operator.post(SILENCE, silence_post(matchers="rack=A01\nrule=~gpu-(\njust words"))
    html = answer.content.decode()
    assert answer.status_code == 200
    assert "line 3: &#x27;just words&#x27; is not label=value" in html
    mute_all = operator.post(SILENCE, silence_post(matchers="rack=~.*")).content.decode()
    assert "it would mute all" in mute_all
    bad_regex = operator.post(SILENCE, silence_post(matchers="rule=~gpu-(")).content.decode()
    assert "is not a regular expression" in bad_regex
    assert 'id="id_matchers_errors"' in bad_regex  # next to the matchers field
    assert not Silence.objects.exists()


def test_a_silence_must_end_after_it_starts_and_within_a_month(demo: Site) -> None:
    operator = member("dana", "Operators")
    backwards = silence_post(starts_at="2031-05-02T10:00", ends_at="2031-05-02T09:00")
    assert "must end after it starts" in operator.post(SILENCE, backwards).content.decode()
    no_end = operator.post(SILENCE, silence_post(duration="soon")).content.decode()
    assert "give an end, or a duration" in no_end
    too_long = operator.post(SILENCE, silence_post(duration="40d")).content.decode()
    assert "at most 31 days" in too_long
    assert not Silence.objects.exists()


def test_a_viewer_gets_403_on_both_forms_and_saves_nothing(demo: Site) -> None:
    viewer = member("vic", "Viewers")
    assert viewer.get(SILENCE).status_code == 403
    assert viewer.post(SILENCE, silence_post()).status_code == 403
    window = {"site": demo.pk, "starts_at": "2031-05-02T10:00", "ends_at": "2031-05-02T12:00"}
    assert viewer.post(MAINTENANCE, {**window, "comment": "x"}).status_code == 403
    assert not Silence.objects.exists() and not MaintenanceWindow.objects.exists()


def test_a_form_posted_without_its_csrf_token_is_refused(demo: Site) -> None:
    browser = member("dana", "Operators", Client(enforce_csrf_checks=True))
    assert browser.post(SILENCE, silence_post()).status_code == 403
    assert not Silence.objects.exists()
    page = browser.get(SILENCE).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    answer = browser.post(SILENCE, silence_post(csrfmiddlewaretoken=token.group(1)))
    assert answer.status_code == 302 and Silence.objects.count() == 1


def test_an_operator_plans_maintenance_of_one_rack_or_one_node(demo: Site) -> None:
    operator = member("dana", "Operators")
    when = {"starts_at": "2031-05-02T10:00", "ends_at": "2031-05-02T12:00"}
    rack = Rack.objects.get(name="A01")
    assert (
        operator.post(MAINTENANCE, {"rack": rack.pk, **when, "comment": "PDU"}).status_code == 302
    )
    node = {"node_name": "gpu-a02-01", **when, "comment": "reimage"}
    assert operator.post(MAINTENANCE, node).status_code == 302
    rack_window, node_window = MaintenanceWindow.objects.order_by("pk")
    assert rack_window.rack == rack and rack_window.created_by == "dana"
    assert node_window.node is not None and node_window.node.name == "gpu-a02-01"
    assert node_window.ends_at - node_window.starts_at == dt.timedelta(hours=2)


def test_maintenance_names_exactly_one_place_and_ends_after_it_starts(demo: Site) -> None:
    operator = member("dana", "Operators")
    when = {"starts_at": "2031-05-02T10:00", "ends_at": "2031-05-02T12:00", "comment": "x"}
    rack = Rack.objects.get(name="A01")
    both = operator.post(MAINTENANCE, {"site": demo.pk, "rack": rack.pk, **when})
    assert "choose exactly one of site, rack, node or cooling loop" in both.content.decode()
    neither = operator.post(MAINTENANCE, when)
    assert "choose exactly one of site, rack, node or cooling loop" in neither.content.decode()
    unknown = operator.post(MAINTENANCE, {"node_name": "gpu-zz-99", **when}).content.decode()
    assert "no node &#x27;gpu-zz-99&#x27; at a site you operate" in unknown
    backwards = {**when, "ends_at": "2031-05-02T09:00", "site": demo.pk}
    assert "must end after it starts" in operator.post(MAINTENANCE, backwards).content.decode()
    assert not MaintenanceWindow.objects.exists()


def test_an_operator_of_one_site_mutes_only_that_site(demo: Site, north: Site) -> None:
    user = User.objects.create_user("otto", password="pw")
    SiteRole.objects.create(user=user, site=north, role="operator")
    otto = Client()
    otto.force_login(user)
    unpinned = otto.post(SILENCE, silence_post(matchers="rack=N01")).content.decode()
    assert "add one of site=North" in unpinned
    assert otto.post(SILENCE, silence_post(matchers="site=North\nrack=N01")).status_code == 302
    when = {"starts_at": "2031-05-02T10:00", "ends_at": "2031-05-02T12:00", "comment": "x"}
    other = otto.post(MAINTENANCE, {"rack": Rack.objects.get(name="A01").pk, **when})
    assert "Select a valid choice" in other.content.decode()
    assert otto.post(MAINTENANCE, {"site": north.pk, **when}).status_code == 302
    assert Silence.objects.count() == 1 and MaintenanceWindow.objects.get().site == north


def test_end_now_on_the_alerts_page_lets_a_silenced_alert_be_announced(demo: Site) -> None:
    now = timezone.now()
    alert = AlertInstance.objects.create(
        rule=AlertRule.objects.get(key="gpu-hw-thermal-slowdown"),
        scope="gpu",
        entity="1:0",
        state="firing",
        labels={"site": demo.name, "rack": "A01", "node": "gpu-a01-01", "gpu": "0"},
        site=demo,
        started_at=now,
        fired_at=now,
        updated_at=now,
    )
    silence = Silence.objects.create(
        matchers=[{"label": "rack", "op": "=", "value": "A01"}],
        starts_at=now - dt.timedelta(minutes=5),
        ends_at=now + dt.timedelta(hours=1),
        created_by="dana",
        comment="fan swap",
    )
    operator = member("dana", "Operators")
    page = operator.get("/alerts/").content.decode()
    assert f"silence {silence.pk}" in page and f"End silence {silence.pk} now" in page
    assert 'href="/alerts/silences/new"' in page and 'href="/alerts/maintenance/new"' in page
    ended = operator.post(SILENCE, {"end": silence.pk}, follow=True).content.decode()
    assert f"Silence {silence.pk} ended" in ended
    silence.refresh_from_db()
    assert silence.ends_at <= timezone.now()
    assert f"silence {silence.pk}" not in ended  # the alert is no longer muted
    assert AlertInstance.objects.get(pk=alert.pk).state == "firing"
    viewer = member("vic", "Viewers")
    assert "End silence" not in viewer.get("/alerts/").content.decode()
    assert viewer.post(SILENCE, {"end": silence.pk}).status_code == 403


def test_silence_like_this_starts_the_form_from_the_alerts_place(demo: Site) -> None:
    now = timezone.now()
    AlertInstance.objects.create(
        rule=AlertRule.objects.get(key="gpu-hw-thermal-slowdown"),
        scope="gpu",
        entity="1:0",
        state="firing",
        labels={"site": demo.name, "rule": "gpu-hw-thermal-slowdown", "rack": "A01", "gpu": "0"},
        site=demo,
        started_at=now,
        fired_at=now,
        updated_at=now,
    )
    operator = member("dana", "Operators")
    page = operator.get("/alerts/").content.decode()
    link = re.search(r'href="(/alerts/silences/new\?matchers=[^"]+)"', page)
    assert link is not None
    form = operator.get(link.group(1).replace("&amp;", "&")).content.decode()
    assert "site=Demo datacentre\nrule=gpu-hw-thermal-slowdown\nrack=A01</textarea>" in form
    assert "silences/new?matchers" not in member("vic", "Viewers").get("/alerts/").content.decode()
