from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from fleetwatch import health

urlpatterns = [
    path("admin/", admin.site.urls),
    path("oidc/", include("fleet.oidc.urls")),  # company sign-in, when configured
    path("healthz", health.healthz, name="health"),
    path("", include("fleet.urls")),
    path("", include("dashboard.urls")),
]

# Errors as JSON for API callers and in Fleetwatch's look for people (fleetwatch/errors.py).
handler400 = "fleetwatch.errors.bad_request"
handler403 = "fleetwatch.errors.permission_denied"
handler404 = "fleetwatch.errors.page_not_found"
handler500 = "fleetwatch.errors.server_error"
