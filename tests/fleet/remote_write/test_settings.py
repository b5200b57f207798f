"""Remote write's settings (fleetwatch/remote_write_settings.py): off unless a URL is set; a
malformed URL, muddled credentials or a tenant no header can carry stop the server with the
variable's name."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from fleetwatch.remote_write_settings import DEFAULT_BATCH_SAMPLES, remote_write_from_env

VARS = (
    "FLEETWATCH_REMOTE_WRITE_URL",
    "FLEETWATCH_REMOTE_READ_URL",
    "FLEETWATCH_REMOTE_WRITE_BEARER_TOKEN",
    "FLEETWATCH_REMOTE_WRITE_USERNAME",
    "FLEETWATCH_REMOTE_WRITE_PASSWORD",
    "FLEETWATCH_REMOTE_WRITE_BATCH",
    "FLEETWATCH_REMOTE_WRITE_TENANT",
    "FLEETWATCH_REMOTE_WRITE_TENANT_HEADER",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARS:
        monkeypatch.delenv(name, raising=False)


def test_unset_means_off() -> None:
    config = remote_write_from_env()
    assert not config.enabled and config.read_url == ""
    assert config.batch_samples == DEFAULT_BATCH_SAMPLES


def test_a_receiver_url_turns_it_on_with_its_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_URL", "https://mimir.example:8080/api/v1/push")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_USERNAME", "fleet")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_PASSWORD", "s3cret")

    config = remote_write_from_env()

    assert config.enabled
    assert config.headers() == {"Authorization": "Basic ZmxlZXQ6czNjcmV0"}


@pytest.mark.parametrize(
    "name, value",
    [
        ("FLEETWATCH_REMOTE_WRITE_URL", "prometheus:9090/api/v1/write"),
        ("FLEETWATCH_REMOTE_WRITE_URL", "ftp://prometheus/api/v1/write"),
        ("FLEETWATCH_REMOTE_WRITE_URL", "http://prometheus:ninety/api/v1/write"),
        ("FLEETWATCH_REMOTE_READ_URL", "http:///api/v1"),
    ],
)
def test_a_malformed_url_is_an_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)

    with pytest.raises(ImproperlyConfigured, match=name):
        remote_write_from_env()


def test_a_token_and_a_password_together_are_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_URL", "http://prometheus:9090/api/v1/write")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_BEARER_TOKEN", "t")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_USERNAME", "u")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_PASSWORD", "p")

    with pytest.raises(ImproperlyConfigured, match="one kind of credentials"):
        remote_write_from_env()


def test_a_username_without_a_password_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_USERNAME", "u")

    with pytest.raises(ImproperlyConfigured, match="go together"):
        remote_write_from_env()


def test_a_batch_below_one_sample_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_BATCH", "0")

    with pytest.raises(ImproperlyConfigured, match="FLEETWATCH_REMOTE_WRITE_BATCH"):
        remote_write_from_env()


def test_a_tenant_goes_to_both_endpoints_in_mimirs_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_URL", "http://mimir:8080/api/v1/push")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_BEARER_TOKEN", "t0ken")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_TENANT", "dc-east_gpu.fleet")

    config = remote_write_from_env()

    assert config.headers() == {
        "Authorization": "Bearer t0ken",
        "X-Scope-OrgID": "dc-east_gpu.fleet",
    }


def test_the_tenant_header_can_be_thanos_receives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_URL", "http://thanos-receive:19291/api/v1/receive")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_TENANT", "fleet")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_TENANT_HEADER", "THANOS-TENANT")

    assert remote_write_from_env().headers() == {"THANOS-TENANT": "fleet"}


@pytest.mark.parametrize(
    "name, value",
    [
        ("FLEETWATCH_REMOTE_WRITE_TENANT", "fleet\r\nX-Injected: 1"),
        ("FLEETWATCH_REMOTE_WRITE_TENANT", "team a"),
        ("FLEETWATCH_REMOTE_WRITE_TENANT", "east|west"),
        ("FLEETWATCH_REMOTE_WRITE_TENANT", ".."),
        ("FLEETWATCH_REMOTE_WRITE_TENANT", "x" * 151),
        ("FLEETWATCH_REMOTE_WRITE_TENANT_HEADER", "X Scope: OrgID"),
    ],
)
def test_a_tenant_or_header_a_receiver_cannot_take_is_an_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_URL", "http://mimir:8080/api/v1/push")
    monkeypatch.setenv("FLEETWATCH_REMOTE_WRITE_TENANT", "fleet")
    monkeypatch.setenv(name, value)

    with pytest.raises(ImproperlyConfigured, match=name):
        remote_write_from_env()
