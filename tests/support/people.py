"""People for page tests. A signed-in person with no role sees nothing (fleet/access.py),
so a test that reads pages signs in someone with a role."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from fleet.access import VIEWERS_GROUP


def viewer(name: str, password: str = "pw") -> User:
    """A viewer of every site (the "Viewers" group). get_or_create: a transactional test
    has flushed the group its migration made."""
    user = User.objects.create_user(name, password=password)
    user.groups.add(Group.objects.get_or_create(name=VIEWERS_GROUP)[0])
    return user


# Fixtures: a module binds them to the names its tests take, e.g. `client = people.ops_signed_in`.


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    """Sign-ins (and users made per test, as admin_client's) take microseconds, not the
    production hasher's deliberate fraction of a second."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def ops_signed_in(site: Any) -> Client:
    """ "ops", a viewer of every site, signed in through the login (the module's `site`
    seeded first)."""
    viewer("ops")
    client = Client()
    client.login(username="ops", password="pw")
    return client
