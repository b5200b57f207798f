"""Settings come from the environment through strict helpers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from fleetwatch.env import database_from_url, env_bool, env_int, env_str
from tests.support import services

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


@pytest.mark.parametrize("extra", [{}, {"FLEETWATCH_TESTING": "1"}])
def test_debug_without_a_secret_key_refuses_to_start_saying_so(
    tmp_path: Path, extra: dict[str, str]
) -> None:
    """DEBUG never supplies a key (nor does the test suite's flag): a debug server others can
    reach would sign sessions with a key anyone can read in settings.py."""
    done = _manage({"DEBUG": "1", "FLEETWATCH_VAR_DIR": str(tmp_path), **extra}, "check")
    assert done.returncode != 0
    assert "SECRET_KEY is required (or SECRET_KEY_FILE), also with DEBUG=1" in done.stderr
    assert "secrets.token_urlsafe" in done.stderr  # and how to make one


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
    assert {"SECRET_KEY_FILE", "FLEETWATCH_PROXY_SSL_HEADER"} <= env.keys()
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


def _secret_key_file(tmp_path: Path) -> str:
    key = tmp_path / "secret_key"
    key.write_text(os.urandom(48).hex())
    return str(key)


def test_production_is_the_default_shape_three_variables_pass_the_deploy_check(
    tmp_path: Path,
) -> None:
    """No https switch to remember: a key, the host and the database, and Django's deploy
    check has nothing to say."""
    env = {
        "SECRET_KEY_FILE": _secret_key_file(tmp_path),
        "ALLOWED_HOSTS": "fleet.example.com",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'fleet.sqlite3'}",
    }
    done = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_plain_http_is_one_explicit_switch_and_the_deploy_check_names_what_it_gives_up(
    tmp_path: Path,
) -> None:
    """The same check does find the gaps, so the clean run above means something."""
    env = {
        "SECRET_KEY_FILE": _secret_key_file(tmp_path),
        "ALLOWED_HOSTS": "fleet.example.com",
        "FLEETWATCH_VAR_DIR": str(tmp_path / "var"),
        "FLEETWATCH_PLAIN_HTTP": "1",
    }
    done = _manage(env, "check", "--deploy")
    for code in ("W004", "W008", "W012", "W016"):
        assert f"security.{code}" in done.stderr + done.stdout, code


@pytest.mark.parametrize("name", ["FLEETWATCH_SECURE_COOKIES", "FLEETWATCH_SSL_REDIRECT"])
def test_a_retired_https_switch_left_off_says_what_replaced_it(tmp_path: Path, name: str) -> None:
    out = _load_settings({"FLEETWATCH_VAR_DIR": str(tmp_path), "FLEETWATCH_DEMO": "1", name: "0"})
    assert out.returncode != 0 and f"{name} is gone" in out.stderr
    assert "FLEETWATCH_PLAIN_HTTP=1" in out.stderr


def test_a_metrics_allow_list_entry_that_is_not_an_address_stops_the_server(
    tmp_path: Path,
) -> None:
    bad = {"FLEETWATCH_METRICS_ALLOW": "10.0.0.7, prometheus.internal"}
    out = _load_settings({"FLEETWATCH_VAR_DIR": str(tmp_path), "FLEETWATCH_DEMO": "1", **bad})
    assert out.returncode != 0
    assert "FLEETWATCH_METRICS_ALLOW: 'prometheus.internal' is not an address" in out.stderr


def test_the_proxy_ssl_header_is_read_as_name_and_value(tmp_path: Path) -> None:
    code = (
        "from django.conf import settings; import django; django.setup();"
        "print(settings.SECURE_PROXY_SSL_HEADER, settings.SESSION_COOKIE_SECURE,"
        " settings.CSRF_COOKIE_SECURE, settings.SECURE_SSL_REDIRECT)"
    )
    env = {
        "SECRET_KEY": "k" * 50,
        "FLEETWATCH_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "fleetwatch.settings",
    }
    run = [sys.executable, "-c", code]
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    plain = {**base, **env, "FLEETWATCH_PLAIN_HTTP": "1"}
    demo = subprocess.run(run, env=plain, cwd=ROOT, capture_output=True, text=True)
    assert demo.stdout.split() == ["None", "False", "False", "False"], demo.stderr
    https = subprocess.run(run, env={**base, **env}, cwd=ROOT, capture_output=True, text=True)
    assert https.stdout.split() == ["None", "True", "True", "True"], https.stderr
    env.update(FLEETWATCH_PROXY_SSL_HEADER="X-Forwarded-Proto: https")
    proxied = subprocess.run(run, env={**base, **env}, cwd=ROOT, capture_output=True, text=True)
    assert proxied.stdout.startswith("('HTTP_X_FORWARDED_PROTO', 'https')"), proxied.stderr
    env.update(FLEETWATCH_PROXY_SSL_HEADER="https")
    bad = subprocess.run(run, env={**base, **env}, cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "FLEETWATCH_PROXY_SSL_HEADER" in bad.stderr


def _cache_shell(env: dict[str, str], code: str) -> str:
    """What `code` prints in a fresh process of the installation `env` describes, with
    Django's cache as `cache`."""
    done = _manage(env, "shell", "-c", f"from django.core.cache import cache; {code}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()  # after what the shell itself says on start
    return lines[-1] if lines else ""


@pytest.mark.parametrize("shape", ["embedded", pytest.param("redis", marks=pytest.mark.services)])
def test_what_one_process_stores_in_the_cache_another_reads(tmp_path: Path, shape: str) -> None:
    """Forecasts are stored by the task and read by every server and worker process
    (fleet/read/forecast_now.py): the cache is one the installation's processes share —
    files in its var directory, or its Redis database (another installation's is not it)."""
    env = {"FLEETWATCH_DEMO": "1", "FLEETWATCH_VAR_DIR": str(tmp_path / "one")}
    other = {**env, "FLEETWATCH_VAR_DIR": str(tmp_path / "two")}
    with contextlib.ExitStack() as stack:
        if shape == "redis":
            env["REDIS_URL"] = stack.enter_context(services.private_redis())
            other["REDIS_URL"] = stack.enter_context(services.private_redis())
        _cache_shell(env, "cache.set('shared', 'stored by one process', 60)")
        assert _cache_shell(env, "print(cache.get('shared'))") == "stored by one process"
        assert _cache_shell(other, "print(cache.get('shared'))") == "None"
