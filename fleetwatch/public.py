"""The one list of URLs that answer without a sign-in (docs/operations.md, "Security").

Every other view needs a signed-in person (`SignInRequiredMiddleware`, in settings): a new
page is closed unless it is marked `public` and added to PUBLIC_URLS. The URL walk in
tests/test_public_urls.py fails when a routed view is public without being listed, or
listed without being public (company sign-in is routed only when configured).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.http import HttpRequest, HttpResponseBase

from fleetwatch.errors import error_response, wants_json

__all__ = ("PUBLIC_URLS", "SignInRequiredMiddleware", "public")

# URL name → what guards it instead of a sign-in.
PUBLIC_URLS: dict[str, str] = {
    "admin:login": "the sign-in page",
    "oidc-sign-in": "company sign-in, when configured: sends the browser to the provider",
    "oidc-callback": "company sign-in, when configured: the provider's answer",
    "health": "the health check: says only whether the database answers",
    "enroll": "agent API: an enrolment token",
    "ingest": "agent API: the node's token",
    "inventory": "agent API: the node's token",
    "metrics": "Prometheus: the metrics token, an allowed address, or FLEETWATCH_METRICS_PUBLIC",
}

View = TypeVar("View", bound=Callable[..., Any])


def public(view: View) -> View:
    """Marks a view as answering without a sign-in; its URL name must be in PUBLIC_URLS."""
    return login_not_required(view)  # type: ignore[no-any-return]


class SignInRequiredMiddleware(LoginRequiredMiddleware):
    """Django's: a person is sent to the sign-in page; an API caller (fleetwatch/errors.py)
    is answered 401 in JSON, since a script cannot follow a redirect to a form."""

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., HttpResponseBase],
        view_args: tuple[Any, ...],
        view_kwargs: dict[Any, Any],
    ) -> HttpResponseBase | None:
        refused = super().process_view(request, view_func, view_args, view_kwargs)
        if refused is not None and wants_json(request):
            return error_response(request, 401, "sign in first", field="session")
        return refused
