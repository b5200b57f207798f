"""People for page tests. A signed-in person with no role sees nothing (fleet/access.py),
so a test that reads pages signs in someone with a role."""

from __future__ import annotations

from django.contrib.auth.models import Group, User

from fleet.access import VIEWERS_GROUP


def viewer(name: str, password: str = "pw") -> User:
    """A viewer of every site (the "Viewers" group). get_or_create: a transactional test
    has flushed the group its migration made."""
    user = User.objects.create_user(name, password=password)
    user.groups.add(Group.objects.get_or_create(name=VIEWERS_GROUP)[0])
    return user
