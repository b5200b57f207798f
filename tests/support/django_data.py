"""What the migrations put in the test database (the rule pack, groups, permissions)
stays there for every test, whatever order the tests run in.

A test that commits (`django_db(transaction=True)`) ends with Django's flush, which
empties every table. Django runs such tests after all others for that reason; a
pytest-xdist worker runs whole files in the order it is handed them, so a file after one
with a committing test would find the rule pack gone. After each committing test the data
are loaded back from the copy Django serialized when it created the test database (those
tests say `serialized_rollback=True`, which asks for that copy)."""

from __future__ import annotations

import pytest
from pytest_django.plugin import blocking_manager_key


def restore_after_flush(item: pytest.Item) -> None:
    marker = item.get_closest_marker("django_db")
    if marker is None or not marker.kwargs.get("transaction"):
        return
    from django.db import connection

    serialized = getattr(connection, "_test_serialized_contents", None)
    if not serialized:
        raise RuntimeError(
            f"{item.nodeid} commits but the test database was not serialized:"
            " mark it django_db(transaction=True, serialized_rollback=True)"
        )
    with item.config.stash[blocking_manager_key].unblock():
        connection.creation.deserialize_db_from_string(serialized)


# The mark for a test whose data other threads read (a socket's consumer): it commits.
COMMITS = pytest.mark.django_db(transaction=True, serialized_rollback=True)
