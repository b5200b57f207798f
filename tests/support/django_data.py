"""Every test finds the test database as the migrations left it, whatever order the tests
run in.

A test that commits (`django_db(transaction=True)`) ends with Django's flush, which empties
every model's table — the migrations' data too (the rule pack, groups, permissions) — and
leaves the storage tables that are not models (latest state, raw samples, rollups: `fw_*`)
holding what the test committed. Django runs such tests after all others for that reason;
a pytest-xdist worker runs whole files in the order it is handed them, so a file after one
with a committing test would find the rule pack gone and another test's latest state.

So, after each committing test, the models' data are loaded back from the copy Django
serialized when it created the test database (those tests say `serialized_rollback=True`,
which asks for it), and the storage tables are emptied: the migrations put no rows in them."""

from __future__ import annotations

import pytest
from pytest_django.plugin import blocking_manager_key

# The mark for a test whose data other threads read (a socket's consumer): it commits.
COMMITS = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def commits(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("django_db")
    return marker is not None and bool(marker.kwargs.get("transaction"))


def restore_after_flush(item: pytest.Item) -> None:
    if not commits(item):
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
        with connection.cursor() as cur:
            for table in _storage_tables():
                cur.execute(f"DELETE FROM {table}")


def _storage_tables() -> list[str]:
    """Tables no model owns (Django's flush leaves them): the storage layer's."""
    from django.db import connection

    intro = connection.introspection
    models = set(intro.django_table_names(include_views=False))
    return sorted(
        t
        for t in intro.table_names(include_views=False)
        if t not in models and t != "django_migrations" and not t.startswith("sqlite_")
    )
