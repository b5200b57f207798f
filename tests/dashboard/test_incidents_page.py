"""Incidents, not instances (issue 18): the alerts page leads with each open incident — its
cause, its symptoms and its consequences, members folded by rule with their count and
expandable — and an operator acknowledges, silences or plans maintenance for a whole
incident as well as for one alert, only at the sites their roles allow."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from fleet.alerts.models import AlertGroup, AlertInstance, AlertRule, MaintenanceWindow, Silence
from fleet.alerts.muting import Mutes
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import CoolingLoop, Hall, Node, Rack, Site, SiteRole

pytestmark = pytest.mark.django_db

THERMAL_GPUS = 6
LOST_GPUS = 2


@pytest.fixture
def demo() -> Site:
    return seed_demo_site("demo", tuple(replace(p, nodes=2) for p in DEMO_RACKS[:2]), 4)


def member(
    rule: str,
    scope: str,
    entity: str,
    *,
    group: AlertGroup | None,
    state: str = "firing",
    **place: Any,
) -> AlertInstance:
    now = timezone.now()
    labels = {k: str(v) for k, v in place.pop("labels", {}).items()}
    if group is not None:
        labels["incident"] = group.key  # the contract: every member names its incident
    return AlertInstance.objects.create(
        rule=AlertRule.objects.get(key=rule),
        scope=scope,
        entity=entity,
        state=state,
        value=1.0,
        labels=labels,
        group=group,
        started_at=now,
        fired_at=now if state == "firing" else None,
        updated_at=now,
        **place,
    )


def gpu_place(node: Node, index: int) -> dict[str, Any]:
    rack = node.rack
    return {
        "site_id": rack.hall.site_id,
        "rack_id": rack.id,
        "node_id": node.id,
        "loop_id": rack.loop_id,
        "labels": {
            "site": rack.hall.site.name,
            "rack": rack.name,
            "node": node.name,
            "gpu": index,
            "loop": "CDU-1",
        },
    }


def cdu_incident(site: Site) -> AlertGroup:
    """CDU-1's pumps stopped: the loop's alert, six GPUs in thermal slowdown in A01–A02,
    two GPUs off the bus; and a pending alert elsewhere, in no incident yet."""
    loop = CoolingLoop.objects.get(name="CDU-1")
    group = AlertGroup.objects.create(
        key=f"loop:{loop.id}", site=site, opened_at=timezone.now(), title="CDU-1: no pump running"
    )
    member(
        "loop-no-pump-running",
        "loop",
        str(loop.id),
        group=group,
        site_id=site.id,
        loop_id=loop.id,
        labels={"site": site.name, "loop": "CDU-1"},
    )
    gpus = [(n, i) for n in Node.objects.filter(rack__loop=loop).order_by("name") for i in range(4)]
    for node, index in gpus[:3] + gpus[8:11]:  # three in A01, three in A02
        member(
            "gpu-hw-thermal-slowdown",
            "gpu",
            f"{node.id}:{index}",
            group=group,
            **gpu_place(node, index),
        )
    for node, index in gpus[-LOST_GPUS:]:
        member("gpu-missing", "gpu", f"{node.id}:{index}", group=group, **gpu_place(node, index))
    far = Node.objects.get(name="gpu-a01-01")
    member(
        "gpu-headroom-low", "gpu", f"{far.id}:3", group=None, state="pending", **gpu_place(far, 3)
    )
    return group


def user(name: str, *groups: str, **site_roles: str) -> Client:
    person = User.objects.create_user(name, password="pw")
    for g in groups:
        person.groups.add(Group.objects.get(name=g))
    for slug, role in site_roles.items():
        SiteRole.objects.create(user=person, site=Site.objects.get(slug=slug), role=role)
    client = Client()
    client.force_login(person)
    return client


def text_of(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_the_page_leads_with_one_incident_its_cause_then_its_folded_members(demo: Site) -> None:
    group = cdu_incident(demo)
    html = user("vic", "Viewers").get("/alerts/").content.decode()
    words = text_of(html)
    assert "1 incident" in words and "alerts: 9 firing · 1 pending" in words
    block = html[html.index(f'<article class="incident sev-critical" id="incident-{group.pk}"') :]
    block = block[: block.index("</article>")]
    said = text_of(block)
    assert said.startswith("critical CDU-1: no pump running 9 alerts (9 firing)")
    # Cause first, then symptoms, then consequences; each rule once, with its count.
    cause, symptoms, lost = (said.index(w) for w in ("Cause", "Symptoms", "Consequences"))
    assert cause < symptoms < lost
    assert f"{THERMAL_GPUS} × HW thermal slowdown at A01–A02 ({THERMAL_GPUS} firing)" in said
    assert f"{LOST_GPUS} × GPU missing from its node at A02 ({LOST_GPUS} firing)" in said
    assert "1 × No CDU pump running at Demo datacentre / CDU-1 (1 firing)" in said
    # Folded, each fold expandable to its rows.
    assert block.count("<details id=") == 3
    assert " open>" not in block  # the card says what each fold holds
    loose = html[html.index("Alerting outside an incident") :]
    assert loose.count(" open>") == 1  # one pending alert: its row shown at once
    assert block.count("data-alert=") == 1 + THERMAL_GPUS + LOST_GPUS
    # The pending alert in no incident is folded apart, not mixed in.
    assert "1 × GPU near its slowdown limit at A01 (0 firing, 1 pending)" in words
    assert html.index("Alerting outside an incident") > html.index(f'id="incident-{group.pk}"')


def test_an_operator_acknowledges_a_whole_incident_with_one_reason(demo: Site) -> None:
    group = cdu_incident(demo)
    ops = user("dana", "Operators")
    assert "Acknowledge the incident (9 alerts)" in ops.get("/alerts/").content.decode()
    refused = ops.post("/alerts/acknowledge", {"incident": group.pk, "comment": " "}, follow=True)
    assert "needs a comment" in refused.content.decode()
    assert not AlertInstance.objects.filter(acknowledged_at__isnull=False).exists()
    done = ops.post(
        "/alerts/acknowledge", {"incident": group.pk, "comment": "pumps: on it"}, follow=True
    )
    assert "Incident acknowledged (9 alert(s) of it)" in done.content.decode()
    members = AlertInstance.objects.filter(group=group)
    assert {(m.acknowledged_by, m.ack_comment) for m in members} == {("dana", "pumps: on it")}
    loose = AlertInstance.objects.get(group__isnull=True)
    assert loose.acknowledged_at is None  # not part of the incident
    assert all(m.state == "firing" for m in members)  # acknowledged, not resolved


def test_acknowledging_an_incident_follows_site_roles_and_refuses_bad_input(demo: Site) -> None:
    group = cdu_incident(demo)
    north = Site.objects.create(slug="north", name="North")
    Rack.objects.create(
        hall=Hall.objects.create(site=north, name="N"), name="N01", power_budget_kw=40
    )
    post = {"incident": group.pk, "comment": "mine"}
    assert user("vic", "Viewers").post("/alerts/acknowledge", post).status_code == 403
    elsewhere = user("nora", north="operator")
    assert elsewhere.post("/alerts/acknowledge", post).status_code == 404  # cannot even see it
    watcher = user("will", demo="viewer", north="operator")
    assert watcher.post("/alerts/acknowledge", post).status_code == 403
    page = watcher.get("/alerts/").content.decode()
    assert f'id="incident-{group.pk}"' in page and "Acknowledge the incident" not in page
    ops = user("dana", "Operators")
    assert ops.post("/alerts/acknowledge", {"incident": "x", "comment": "a"}).status_code == 400
    assert ops.post("/alerts/acknowledge", {"incident": 999999, "comment": "a"}).status_code == 404
    assert not AlertInstance.objects.filter(acknowledged_at__isnull=False).exists()
    closed = AlertGroup.objects.create(key="rack:1:x", site=demo, opened_at=timezone.now())
    AlertGroup.objects.filter(pk=closed.pk).update(closed_at=timezone.now())
    answer = ops.post("/alerts/acknowledge", {"incident": closed.pk, "comment": "a"}, follow=True)
    assert "is not open" in answer.content.decode()


def test_silencing_an_incident_mutes_every_member_and_nothing_else(demo: Site) -> None:
    group = cdu_incident(demo)
    ops = user("dana", "Operators")
    page = ops.get("/alerts/").content.decode()
    link = re.search(r'href="([^"]+)"[^>]*>silence the incident', page)
    assert link is not None
    query = parse_qs(urlsplit(unescape(link.group(1))).query)
    matchers = query["matchers"][0]
    assert matchers == f"site=Demo datacentre\nincident={group.key}"
    form = ops.get(unescape(link.group(1))).content.decode()
    assert f"incident={group.key}" in unescape(form)
    saved = ops.post(
        "/alerts/silences/new",
        {"matchers": matchers, "duration": "2h", "comment": "CDU-1 pump swap"},
    )
    assert saved.status_code == 302
    silence = Silence.objects.get()
    mutes = Mutes.at(timezone.now() + dt.timedelta(seconds=1))
    for inst in AlertInstance.objects.all():
        reason = mutes.reason(inst.labels, inst.site_id, inst.rack_id, inst.node_id)
        assert reason == ("" if inst.group_id is None else f"silence {silence.pk}")


def test_maintenance_of_a_rack_incident_starts_from_its_rack(demo: Site) -> None:
    rack = Rack.objects.get(name="A01")
    node = Node.objects.filter(rack=rack).order_by("name").first()
    assert node is not None
    group = AlertGroup.objects.create(
        key=f"rack:{rack.id}:gpu-xid-fatal", site=demo, opened_at=timezone.now()
    )
    for index in range(3):
        member("gpu-xid-fatal", "gpu", f"{node.id}:{index}", group=group, **gpu_place(node, index))
    ops = user("dana", "Operators")
    page = ops.get("/alerts/").content.decode()
    assert "3 × Fatal XID at A01 (3 firing)" in text_of(page)
    assert f'href="/alerts/maintenance/new?rack={rack.id}"' in page
    assert "plan maintenance of rack A01" in page
    form = ops.get(f"/alerts/maintenance/new?rack={rack.id}").content.decode()
    assert re.search(rf'<option value="{rack.id}" selected>', form)


def test_maintenance_of_a_loop_incident_covers_the_loop_and_the_racks_it_cools(
    demo: Site,
) -> None:
    group = cdu_incident(demo)
    loop = CoolingLoop.objects.get(name="CDU-1")
    ops = user("dana", "Operators")
    page = ops.get("/alerts/").content.decode()
    assert f'href="/alerts/maintenance/new?loop={loop.id}"' in page
    assert "plan maintenance of CDU-1 and what it cools" in page
    form = ops.get(f"/alerts/maintenance/new?loop={loop.id}").content.decode()
    assert re.search(rf'<option value="{loop.id}" selected>', form)
    starts = timezone.now().replace(microsecond=0)
    answer = ops.post(
        "/alerts/maintenance/new",
        {
            "loop": loop.id,
            "starts_at": starts.strftime("%Y-%m-%d %H:%M:%S"),
            "ends_at": (starts + dt.timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S"),
            "comment": "swapping CDU-1's pump 2",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    mutes = Mutes.at(timezone.now() + dt.timedelta(seconds=1))
    members = list(AlertInstance.objects.filter(group=group))
    assert members and all(
        mutes.reason(m.labels, m.site_id, m.rack_id, m.node_id, m.loop_id)
        == "cooling loop in maintenance"
        for m in members
    )
    # a rack on another loop (or none) is not covered
    assert mutes.reason({}, demo.id, None, None, None) == ""


def test_a_maintenance_window_names_exactly_one_place(demo: Site) -> None:
    loop = CoolingLoop.objects.get(name="CDU-1")
    ops = user("dana", "Operators")
    starts = timezone.now().replace(microsecond=0)
    answer = ops.post(
        "/alerts/maintenance/new",
        {
            "loop": loop.id,
            "rack": Rack.objects.get(name="A01").id,
            "starts_at": starts.strftime("%Y-%m-%d %H:%M:%S"),
            "ends_at": (starts + dt.timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S"),
            "comment": "two places",
        },
    )
    assert answer.status_code == 200
    assert "choose exactly one of site, rack, node or cooling loop" in answer.content.decode()
    assert not MaintenanceWindow.objects.exists()
