"""Closed by default: every URL pattern, the admin's included, needs a sign-in unless it is
on the one documented list (fleetwatch/public.py, docs/operations.md "Security"), so a new
page cannot be public by accident.

The walk reads Django's URL resolver: a pattern's view is public exactly when it carries
`login_required = False` (the `public` marker). Then each pattern is asked anonymously, as
a stranger would: everything off the list is sent to the sign-in page (API callers: 401).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from fleetwatch.public import PUBLIC_URLS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Route:
    pattern: str  # as the resolver holds it, prefixes joined
    name: str | None  # namespaced: "admin:login"
    view: Any

    @property
    def public(self) -> bool:
        return getattr(self.view, "login_required", True) is False


def walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[Route]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = ":".join(n for n in (namespace, entry.namespace or "") if n)
            yield from walk(entry.url_patterns, prefix + str(entry.pattern), inner)
        elif isinstance(entry, URLPattern):
            name = f"{namespace}:{entry.name}" if namespace and entry.name else entry.name
            yield Route(prefix + str(entry.pattern), name, entry.callback)


ROUTES = list(walk(get_resolver().url_patterns))

# A value each path converter and each regex group of the routes accepts.
_CONVERTERS = {"int": "1", "str": "x", "slug": "x", "path": "x/y", "uuid": "0" * 32}


def sample_path(pattern: str) -> str:
    """A concrete path `pattern` matches: converters and named groups get a sample value,
    an alternation its first branch."""
    path = re.sub(r"\(\?P<\w+>([\w-]+)(?:\|[^)]*)?\)", r"\1", pattern)  # (?P<app>auth|fleet)
    path = re.sub(r"\(\?P<\w+>\.\*\)", "x", path)  # the admin's catch-all
    path = re.sub(r"<(?:(\w+):)?\w+>", lambda m: _CONVERTERS[m.group(1) or "str"], path)
    return "/" + path.replace("^", "").replace("$", "")


def test_the_walk_sees_every_kind_of_route() -> None:
    names = {route.name for route in ROUTES}
    assert {"fleet-overview", "alerts", "metrics", "admin:index", "admin:login"} <= names
    assert any(route.name and route.name.startswith("admin:fleet_") for route in ROUTES)
    assert len(ROUTES) > 100  # the admin's changelists, forms and history for every model


def test_only_the_listed_views_are_public_and_every_listed_one_that_is_routed_is() -> None:
    public = {route.name for route in ROUTES if route.public}
    routed = {route.name for route in ROUTES}
    assert public == set(PUBLIC_URLS) & routed
    assert {"admin:login", "health", "enroll", "ingest", "inventory", "metrics"} <= public


def test_sign_in_is_enforced_for_every_view_off_the_list() -> None:
    assert "fleetwatch.public.SignInRequiredMiddleware" in settings.MIDDLEWARE
    assert "dashboard.no_role.NoRoleMiddleware" in settings.MIDDLEWARE


@pytest.mark.parametrize(
    "route", [r for r in ROUTES if not r.public], ids=lambda r: r.name or r.pattern
)
def test_a_stranger_is_sent_to_sign_in_from_every_other_url(route: Route) -> None:
    path = sample_path(route.pattern)
    assert resolve(path).func is route.view, f"{route.pattern}: the sample {path} is another's"
    answer = Client().get(path)
    if path.startswith("/api/"):
        assert answer.status_code == 401, path
        assert answer.json()["error"]["reason"] == "sign in first"
    else:
        assert answer.status_code == 302, path
        assert answer["Location"].startswith(f"{settings.LOGIN_URL}?next="), path


def test_the_list_is_the_documented_one() -> None:
    """docs/operations.md names each public URL with what guards it."""
    docs = (ROOT / "docs" / "operations.md").read_text()
    listed = docs.split("<!-- public-urls -->", 1)[1].split("<!-- /public-urls -->", 1)[0]
    for name in PUBLIC_URLS:
        assert f"`{name}`" in listed, name
