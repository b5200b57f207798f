"""Runs the test provider: `python -m tests.support.oidc_provider.serve SPEC_JSON`.

The spec (see `ProviderSpec` in __init__.py) names the port, the client and its redirect
URI, and the people with their password and groups. The database (OIDC_PROVIDER_DB) is
made afresh, with an RSA signing key, then served over plain http until terminated."""

from __future__ import annotations

import io
import json
import os
import sys


def main() -> None:
    spec = json.loads(sys.argv[1])
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.support.oidc_provider.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    _seed(spec)

    from django.core.servers.basehttp import WSGIServer, run
    from django.core.wsgi import get_wsgi_application

    WSGIServer.request_queue_size = 20
    run("127.0.0.1", spec["port"], get_wsgi_application(), threading=True)


def _seed(spec: dict[str, object]) -> None:
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from oidc_provider.models import Client, ResponseType, RSAKey  # type: ignore[import-untyped]

    call_command("creatersakey", stdout=io.StringIO())
    assert RSAKey.objects.exists(), "no signing key"
    client = Client.objects.create(
        name="Fleetwatch",
        client_type="confidential",
        client_id=spec["client_id"],
        client_secret=spec["client_secret"],
        jwt_alg="RS256",
        require_consent=False,
        _redirect_uris=spec["redirect_uri"],
    )
    client.response_types.add(ResponseType.objects.get(value="code"))
    people: dict[str, dict[str, object]] = spec["people"]  # type: ignore[assignment]
    for username, person in people.items():
        user = User.objects.create_user(
            username, email=f"{username}@example.com", password=str(person["password"])
        )
        for name in person["groups"]:  # type: ignore[attr-defined]
            user.groups.add(Group.objects.get_or_create(name=name)[0])


if __name__ == "__main__":
    main()
