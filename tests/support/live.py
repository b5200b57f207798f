"""A logged-in browser's live socket, without a browser: for tests that watch pushes."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.parse
import urllib.request
from typing import Any

from tests.support.server import FleetServer

USER, PASSWORD = "ops", "ops-password-1"


def create_ops_user(server: FleetServer) -> None:
    server.extra_env["DJANGO_SUPERUSER_PASSWORD"] = PASSWORD
    server.manage("createsuperuser", "--noinput", "--username", USER, "--email", "o@x.io")


def login_cookie(server: FleetServer) -> str:
    """Log in through the login form (CSRF included); return the Cookie header value."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(server.url + "/admin/login/", timeout=10).read().decode()
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert match, "no CSRF token on the login page"
    form = {"username": USER, "password": PASSWORD, "csrfmiddlewaretoken": match.group(1)}
    request = urllib.request.Request(
        server.url + "/admin/login/?next=/",
        data=urllib.parse.urlencode(form).encode(),
        headers={"Referer": server.url + "/admin/login/"},
    )
    opener.open(request, timeout=10).read()
    cookies = {c.name: c.value for c in jar}
    assert "sessionid" in cookies, "login failed"
    return "; ".join(f"{k}={v}" for k, v in cookies.items())


def live_socket(server: FleetServer, cookie: str, path: str = "/ws/live/fleet") -> Any:
    """A signed-in browser's socket to a live route (dashboard/routing.py): the overview
    by default, or e.g. /ws/live/rack/<id> or /ws/live/site/<id>."""
    from websockets.sync.client import connect

    headers = {"Cookie": cookie, "Origin": server.url}
    return connect(server.ws_url + path, additional_headers=headers)
