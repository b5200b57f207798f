"""A silence's regular expressions are bounded, so one matcher cannot slow evaluation:
RE2 matches in time linear in the label (a pattern that makes a backtracking engine run
for ages is as quick as any), a pattern RE2 cannot do is refused with the reason, and a
matcher's value has a documented length cap — in the model, the admin and the dashboard's
silence form alike."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.test import Client

from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance, Silence
from fleet.alerts.muting import MATCHER_VALUE_MAX_CHARS, Mutes, parse_matchers
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Node
from tests.support.alert_engine import only_inlet_rule
from tests.support.latest import store_latest

pytestmark = pytest.mark.django_db

PATHOLOGICAL = "(a+)+$"  # nested quantifiers: a backtracking engine tries 2^n ways
LONG_A_B = "a" * 50_000 + "b"  # never matches, after every way was tried
FAST_S = 0.5


def silence(*matchers: dict[str, str], minutes: float = 60) -> Silence:
    now = dt.datetime.now(dt.UTC)
    return Silence(
        matchers=list(matchers),
        starts_at=now - dt.timedelta(minutes=1),
        ends_at=now + dt.timedelta(minutes=minutes),
        created_by="ops",
        comment="test",
    )


def refusal(candidate: Silence) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as refused:
        candidate.full_clean()
    return refused.value.message_dict


def test_a_pathological_pattern_matches_a_long_label_in_linear_time() -> None:
    (matcher,), errors = parse_matchers([{"label": "note", "op": "=~", "value": PATHOLOGICAL}])
    assert errors == []
    started = time.perf_counter()
    assert not matcher.matches({"note": LONG_A_B})
    assert matcher.matches({"note": "a" * 50_000})
    assert time.perf_counter() - started < FAST_S


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(A0\d)\1", "invalid escape sequence"),  # a backreference
        (r"A0(?=1)", "invalid perl operator"),  # lookahead
        ("(x{1000}){1000}", "invalid repetition size"),
    ],
)
def test_a_pattern_re2_cannot_do_is_refused_with_its_reason(pattern: str, reason: str) -> None:
    errors = refusal(silence({"label": "rack", "op": "=~", "value": pattern}))
    (message,) = errors["matchers"]
    assert "is not a regular expression RE2 accepts" in message and reason in message


def test_a_too_long_matcher_is_refused_naming_the_field_and_the_limit() -> None:
    racks = "|".join(f"A{n:03d}" for n in range(200))  # 999 characters
    assert len(racks) > MATCHER_VALUE_MAX_CHARS
    errors = refusal(silence({"label": "rack", "op": "=~", "value": racks}))
    assert list(errors) == ["matchers"]
    assert errors["matchers"] == [
        f"matcher 1: value of rack is {len(racks):,} characters long;"
        f" at most {MATCHER_VALUE_MAX_CHARS}"
    ]
    at_the_cap = "A0[1-9]|" * (MATCHER_VALUE_MAX_CHARS // 8)
    silence({"label": "rack", "op": "=~", "value": at_the_cap[:-1]}).full_clean()


def test_evaluation_with_a_pathological_silence_in_force_stays_fast() -> None:
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=1)
    node = Node.objects.get()
    only_inlet_rule(summary="{node} inlet {value:.1f} °C", labels={"note": LONG_A_B})
    slow = silence({"label": "note", "op": "=~", "value": PATHOLOGICAL})
    slow.full_clean()
    slow.save()
    now = time.time()
    store_latest("node", (node.id,), now, temp_inlet_c=52.0)

    started = time.perf_counter()
    evaluate(now)
    took = time.perf_counter() - started

    instance = AlertInstance.objects.get(rule__key="inlet-hot")
    assert instance.state == "firing"
    assert took < 5 * FAST_S, f"evaluation took {took:.2f} s"
    # what notify.py asks of each firing alert: not muted by the pattern that cannot
    # match; muted by one that does, on the same long label
    at = dt.datetime.fromtimestamp(now, dt.UTC)
    place = (instance.labels, instance.site_id, instance.rack_id, instance.node_id)
    assert Mutes.at(at).reason(*place) == ""
    muting = silence({"label": "note", "op": "=~", "value": "a+b"})
    muting.full_clean()
    muting.save()
    assert Mutes.at(at).reason(*place) == f"silence {muting.pk}"


def _operator(settings: Any) -> Client:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    user = User.objects.create_user("dana", password="pw")
    user.groups.add(Group.objects.get(name="Operators"))
    client = Client()
    client.force_login(user)
    return client


def test_the_dashboard_silence_form_refuses_a_too_long_or_re2_refused_pattern(
    settings: Any,
) -> None:
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=1)
    operator = _operator(settings)
    form = {"duration": "2h", "comment": "fan swap"}
    too_long = "rule=~" + "x" * (MATCHER_VALUE_MAX_CHARS + 1)
    html = operator.post("/alerts/silences/new", {**form, "matchers": too_long}).content
    assert f"at most {MATCHER_VALUE_MAX_CHARS}" in html.decode()
    assert 'id="id_matchers_errors"' in html.decode()  # next to the matchers field
    lookahead = operator.post("/alerts/silences/new", {**form, "matchers": "rack=~A0(?=1)"})
    assert "is not a regular expression RE2 accepts" in lookahead.content.decode()
    assert not Silence.objects.exists()
