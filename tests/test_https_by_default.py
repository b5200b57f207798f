"""https is the default shape (fleetwatch/settings.py): plain http is redirected, except the
health check, which probes ask over plain http; behind a TLS proxy whose header is not
trusted, a clear error replaces the endless redirect (fleetwatch/proxy.py)."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db

HTTPS = {"SECURE_SSL_REDIRECT": True, "SESSION_COOKIE_SECURE": True, "CSRF_COOKIE_SECURE": True}
PROXY_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")


@override_settings(**HTTPS, SECURE_PROXY_SSL_HEADER=PROXY_HEADER)
def test_plain_http_is_redirected_and_https_through_the_proxy_is_served() -> None:
    plain = Client().get("/alerts/")
    assert plain.status_code == 301 and plain["Location"] == "https://testserver/alerts/"
    proxied = Client().get("/alerts/", HTTP_X_FORWARDED_PROTO="https")
    assert proxied.status_code == 302 and proxied["Location"].startswith("/admin/login/")


@override_settings(**HTTPS, SECURE_PROXY_SSL_HEADER=PROXY_HEADER)
def test_the_health_check_answers_plain_http_without_a_sign_in() -> None:
    answer = Client().get("/healthz")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


@override_settings(**HTTPS, SECURE_PROXY_SSL_HEADER=None)
def test_behind_a_proxy_whose_header_is_not_trusted_the_answer_says_what_to_set() -> None:
    answer = Client().get("/alerts/", HTTP_X_FORWARDED_PROTO="https")
    assert answer.status_code == 500
    assert 'FLEETWATCH_PROXY_SSL_HEADER="X-Forwarded-Proto: https"' in answer.content.decode()
    assert Client().get("/alerts/").status_code == 301  # plain http, no proxy: redirected
