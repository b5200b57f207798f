"""What the admin modules build on: the base classes (typed for mypy, plain at run time),
an admin for records the servers write and people only read, and one for lists that count
each row's children."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

if TYPE_CHECKING:
    # django-stubs makes these generic; at run time they are not subscriptable.
    ModelAdmin = admin.ModelAdmin[Any]
    TabularInline = admin.TabularInline[Any, Any]
else:
    ModelAdmin = admin.ModelAdmin
    TabularInline = admin.TabularInline


class RecordAdmin(ModelAdmin):
    """Rows only the servers write (a pull's bookkeeping, an agent's event, a refusal
    tally): people read them here, and can neither add nor change one."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CountingAdmin(ModelAdmin):
    """A list with a column for how many children each row has (`counted` names the
    relation; the column is `children_column(...)`): one annotated query for the page,
    not one count per row."""

    counted: str

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        counted: QuerySet[Any] = (
            super().get_queryset(request).annotate(_children=Count(self.counted))
        )
        return counted


def children_column(description: str) -> Callable[[Any, Any], int]:
    """A CountingAdmin's count column, headed `description` and sortable."""

    @admin.display(description=description, ordering="_children")
    def column(model_admin: Any, obj: Any) -> int:
        return obj._children  # type: ignore[no-any-return]

    return column
