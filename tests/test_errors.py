"""Errors Django itself answers (unknown URL, CSRF refusal, an exception) come back as
JSON with the field and reason for API callers, and as a Fleetwatch page for people."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.support.people import viewer

pytestmark = pytest.mark.django_db


def test_an_unknown_api_url_is_a_json_404() -> None:
    response = Client().get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": 404, "field": "path", "reason": "no such page or entity"}
    }


def test_an_unknown_page_is_a_fleetwatch_404_page_for_people() -> None:
    response = Client().get("/no-such-page/", HTTP_ACCEPT="text/html")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert b"Fleetwatch" in response.content and b"No such page" in response.content


def test_a_client_asking_for_json_gets_json_for_a_page_too() -> None:
    response = Client().get("/no-such-page/", HTTP_ACCEPT="application/json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == 404


def test_a_post_without_its_csrf_token_is_refused_saying_how_to_recover() -> None:
    viewer("ops", password="pw-12345678")
    client = Client(enforce_csrf_checks=True)
    client.login(username="ops", password="pw-12345678")
    response = client.post("/alerts/acknowledge", {"alert": "1"}, HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["field"] == "csrf" and "reload the page" in error["reason"]


def test_a_server_error_under_the_api_is_json_and_for_people_a_plain_page() -> None:
    from django.test import RequestFactory

    from fleetwatch.errors import server_error

    api = server_error(RequestFactory().get("/api/v1/history"))
    assert api.status_code == 500
    assert json.loads(api.content)["error"]["code"] == 500
    page = server_error(RequestFactory().get("/racks/1/", HTTP_ACCEPT="text/html"))
    assert page.status_code == 500 and b"Server error" in page.content
