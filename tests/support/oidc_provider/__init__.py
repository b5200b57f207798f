"""A real OpenID Connect provider for tests, and a person signing in through it.

django-oidc-provider runs in a Django project of its own (settings.py here), in a process
of its own on a free loopback port, with one confidential client (Fleetwatch) and the
people a test names, each in their groups. Nothing of the protocol is mocked: Fleetwatch
discovers the provider, the browser stand-in (a requests session) follows the real
redirects and posts the provider's sign-in form, and Fleetwatch exchanges the code, checks
the RS256 ID token against the provider's keys and reads its userinfo.

    with OidcProvider.started(tmp_path, redirect_uri, {"vera": ["gpu-viewers"]}) as idp:
        server.extra_env.update(idp.fleetwatch_env(role_map="gpu-viewers=viewer"))
        page = sign_in_with_company_account(server.url, "vera")
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests

from tests.support.processes import stop_process
from tests.support.server import ROOT, free_port

__all__ = ("PASSWORD", "OidcProvider", "sign_in_with_company_account")

PASSWORD = "provider-password-1"
CLIENT_ID = "fleetwatch-test"
CLIENT_SECRET = "fleetwatch-test-client-secret"
START_TIMEOUT_S = 30.0


class OidcProvider:
    def __init__(self, work_dir: Path, redirect_uri: str, people: dict[str, list[str]]) -> None:
        self.work_dir = work_dir
        self.db_path = work_dir / "provider.sqlite3"
        self.log_path = work_dir / "provider.log"
        self.port = free_port()
        self.spec = {
            "port": self.port,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "redirect_uri": redirect_uri,
            "people": {name: {"password": PASSWORD, "groups": g} for name, g in people.items()},
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}/openid"

    def fleetwatch_env(self, role_map: str) -> dict[str, str]:
        """The environment that points a Fleetwatch server at this provider."""
        return {
            "FLEETWATCH_OIDC_ISSUER": self.issuer,
            "FLEETWATCH_OIDC_CLIENT_ID": CLIENT_ID,
            "FLEETWATCH_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "FLEETWATCH_OIDC_PROVIDER_NAME": "Test SSO",
            "FLEETWATCH_OIDC_SCOPES": "openid email profile groups",
            "FLEETWATCH_OIDC_ROLE_MAP": role_map,
        }

    def start(self) -> None:
        """Starts the process; `wait_ready` waits for it (so other set-up runs meanwhile)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        env = {"OIDC_PROVIDER_DB": str(self.db_path), "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.oidc_provider.serve", json.dumps(self.spec)],
            env={**_inherited_env(), **env},
            cwd=ROOT,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self) -> None:
        url = f"{self.issuer}/.well-known/openid-configuration"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"provider exited: {self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(requests.ConnectionError):
                if requests.get(url, timeout=2).ok:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"provider did not answer in {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process(self.proc, 10)
        self.proc = None

    def set_groups(self, username: str, groups: list[str]) -> None:
        """Changes a person's groups at the provider, as its administrator would."""
        with contextlib.closing(sqlite3.connect(self.db_path)) as db:
            (user_id,) = db.execute(
                "SELECT id FROM auth_user WHERE username = ?", (username,)
            ).fetchone()
            db.execute("DELETE FROM auth_user_groups WHERE user_id = ?", (user_id,))
            for name in groups:
                db.execute("INSERT OR IGNORE INTO auth_group (name) VALUES (?)", (name,))
                db.execute(
                    "INSERT INTO auth_user_groups (user_id, group_id)"
                    " SELECT ?, id FROM auth_group WHERE name = ?",
                    (user_id, name),
                )
            db.commit()

    @classmethod
    @contextlib.contextmanager
    def started(
        cls, work_dir: Path, redirect_uri: str, people: dict[str, list[str]]
    ) -> Iterator[OidcProvider]:
        provider = cls(work_dir, redirect_uri, people)
        try:
            provider.start()
            provider.wait_ready()
            yield provider
        finally:
            provider.stop()


def _inherited_env() -> dict[str, str]:
    # Not Fleetwatch's settings module: the provider is a project of its own.
    return {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}


def sign_in_with_company_account(
    fleet_url: str, username: str, next_path: str = "/"
) -> tuple[requests.Session, requests.Response]:
    """A person on Fleetwatch's sign-in page presses "Sign in with …", signs in at the
    provider, and is sent back. Returns their session and the page they land on."""
    browser = requests.Session()
    page = browser.get(f"{fleet_url}/admin/login/", params={"next": next_path}, timeout=10)
    button = re.search(r'<a class="button" href="(/oidc/authenticate/[^"]*)"', page.text)
    assert button, "no company sign-in button on Fleetwatch's sign-in page"
    provider_form = browser.get(fleet_url + html.unescape(button.group(1)), timeout=10)
    assert "/login/" in provider_form.url, f"not at the provider's sign-in: {provider_form.url}"
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', provider_form.text)
    next_field = re.search(r'name="next" value="([^"]*)"', provider_form.text)
    assert token and next_field, "the provider's sign-in form lacks its fields"
    landed = browser.post(
        provider_form.url,
        data={
            "username": username,
            "password": PASSWORD,
            "csrfmiddlewaretoken": token.group(1),
            "next": html.unescape(next_field.group(1)),
        },
        timeout=30,
    )
    return browser, landed
