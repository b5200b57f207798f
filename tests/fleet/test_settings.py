"""Settings come from the environment through strict helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from fleetwatch.env import database_from_url, env_bool, env_int, env_str

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("raw", ["ture", "Y", "enabled", "2"])
def test_a_typo_in_a_boolean_is_an_error_not_false(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("FW_FLAG", raw)
    with pytest.raises(ImproperlyConfigured, match="FW_FLAG"):
        env_bool("FW_FLAG", False)


@pytest.mark.parametrize(
    ("raw", "value"), [("true", True), ("0", False), ("Yes", True), ("", True)]
)
def test_booleans_accept_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, value: bool
) -> None:
    monkeypatch.setenv("FW_FLAG", raw)
    assert env_bool("FW_FLAG", True) is value


def test_integers_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_N", "two")
    with pytest.raises(ImproperlyConfigured, match="not an integer"):
        env_int("FW_N", 1)
    monkeypatch.setenv("FW_N", "0")
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("FW_N", 1, minimum=1)


def test_secrets_can_come_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("FW_SECRET_FILE", str(secret))
    assert env_str("FW_SECRET") == "s3cret"


def test_database_urls_for_postgres_and_sqlite() -> None:
    pg = database_from_url("postgres://fw:p%40ss@db.example:5433/fleet?sslmode=require")
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"], pg["NAME"]) == (
        "fw",
        "p@ss",
        "db.example",
        "5433",
        "fleet",
    )
    assert pg["OPTIONS"] == {"sslmode": "require"}
    assert database_from_url("sqlite:////var/lib/fw.db")["NAME"] == "/var/lib/fw.db"
    with pytest.raises(ImproperlyConfigured, match="mysql"):
        database_from_url("mysql://x/y")


def _load_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FLEETWATCH_", "SECRET"))}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import fleetwatch.settings"],
        env=clean,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def test_secret_key_is_required_outside_the_demo(tmp_path: Path) -> None:
    refused = _load_settings({"FLEETWATCH_VAR_DIR": str(tmp_path)})
    assert refused.returncode != 0 and "SECRET_KEY is required" in refused.stderr
    demo = _load_settings({"FLEETWATCH_VAR_DIR": str(tmp_path), "FLEETWATCH_DEMO": "1"})
    assert demo.returncode == 0, demo.stderr


def test_a_bad_boolean_stops_the_server_with_its_name(tmp_path: Path) -> None:
    out = _load_settings({"FLEETWATCH_VAR_DIR": str(tmp_path), "FLEETWATCH_DEMO": "yess"})
    assert out.returncode != 0 and "FLEETWATCH_DEMO='yess' is not a boolean" in out.stderr


@pytest.mark.parametrize(
    "name",
    ["FLEETWATCH_LATEST_SAVE_S", "FLEETWATCH_REVALIDATE_S", "FLEETWATCH_PG_LOCK_TIMEOUT_MS"],
)
def test_an_ingest_child_setting_that_is_not_a_number_stops_the_server_naming_it(
    tmp_path: Path, name: str
) -> None:
    out = _load_settings({"FLEETWATCH_VAR_DIR": str(tmp_path), "FLEETWATCH_DEMO": "1", name: "x"})
    assert out.returncode != 0 and name in out.stderr


def _production_env() -> dict[str, str]:
    """The server environment docs/operations.md documents, as written there."""
    text = (ROOT / "docs" / "operations.md").read_text()
    block = text.split("<!-- production-env -->", 1)[1].split("<!-- /production-env -->", 1)[0]
    env = {}
    for line in block.splitlines():
        if "=" in line and not line.startswith(("```", "#")):
            name, _, value = line.partition("=")
            env[name] = value.strip('"')
    assert {"FLEETWATCH_SECURE_COOKIES", "FLEETWATCH_HSTS_SECONDS"} <= env.keys()
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FLEETWATCH_", "SECRET", "DEBUG", "ALLOWED_HOSTS", "CSRF_"))
    }
    clean.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        env=clean,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_documented_production_settings_pass_the_deploy_check_with_no_warnings(
    tmp_path: Path,
) -> None:
    env = _production_env()
    key = tmp_path / "secret_key"
    key.write_text(os.urandom(48).hex())
    env["SECRET_KEY_FILE"] = str(key)  # the documented path, made here
    env["FLEETWATCH_VAR_DIR"] = str(tmp_path / "var")
    done = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_without_the_production_variables_the_deploy_check_names_what_is_missing(
    tmp_path: Path,
) -> None:
    """The same check does find the gaps, so the clean run above means something; and the
    defaults are the demo's: no Secure cookies, no redirect, no HSTS on plain http."""
    env = {k: v for k, v in _production_env().items() if not k.startswith("FLEETWATCH_")}
    key = tmp_path / "secret_key"
    key.write_text(os.urandom(48).hex())
    env.update(SECRET_KEY_FILE=str(key), FLEETWATCH_VAR_DIR=str(tmp_path / "var"))
    done = _manage(env, "check", "--deploy")
    for code in ("W004", "W008", "W012", "W016"):
        assert f"security.{code}" in done.stderr + done.stdout, code


def test_the_proxy_ssl_header_is_read_as_name_and_value(tmp_path: Path) -> None:
    code = (
        "from django.conf import settings; import django; django.setup();"
        "print(settings.SECURE_PROXY_SSL_HEADER, settings.SESSION_COOKIE_SECURE,"
        " settings.CSRF_COOKIE_SECURE, settings.SECURE_SSL_REDIRECT)"
    )
    env = {
        "FLEETWATCH_TESTING": "1",
        "FLEETWATCH_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "fleetwatch.settings",
    }
    run = [sys.executable, "-c", code]
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    demo = subprocess.run(run, env={**base, **env}, cwd=ROOT, capture_output=True, text=True)
    assert demo.stdout.split() == ["None", "False", "False", "False"], demo.stderr
    env.update(FLEETWATCH_PROXY_SSL_HEADER="X-Forwarded-Proto: https")
    proxied = subprocess.run(run, env={**base, **env}, cwd=ROOT, capture_output=True, text=True)
    assert proxied.stdout.startswith("('HTTP_X_FORWARDED_PROTO', 'https')"), proxied.stderr
    env.update(FLEETWATCH_PROXY_SSL_HEADER="https")
    bad = subprocess.run(run, env={**base, **env}, cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "FLEETWATCH_PROXY_SSL_HEADER" in bad.stderr
