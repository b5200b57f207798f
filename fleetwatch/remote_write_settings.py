"""Remote write settings (fleet/remote_write/), read from the environment.

Unset `FLEETWATCH_REMOTE_WRITE_URL` means remote write is off: no task ships anything and the
lag rule has no value. `FLEETWATCH_REMOTE_READ_URL` (a Prometheus HTTP API base URL) lets
history pages read ranges older than raw retention back with PromQL. A malformed URL, both
kinds of credentials at once, half of a basic-auth pair, or a tenant a header cannot carry
stops the server with the variable's name (docs/configuration.md, "Remote write"). Kept out
of fleetwatch/settings.py so that file adds one line: `REMOTE_WRITE`.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from fleetwatch.env import env_float, env_int, env_str

__all__ = (
    "DEFAULT_BATCH_SAMPLES",
    "DEFAULT_TENANT_HEADER",
    "RemoteWrite",
    "check_url",
    "remote_write_from_env",
)

# Samples per request: Prometheus's own sender's default (`max_samples_per_send`,
# prometheus/prometheus:docs/configuration/configuration.md, `queue_config`).
DEFAULT_BATCH_SAMPLES = 2000
# The header a multi-tenant receiver takes its tenant from: Grafana Mimir and Cortex
# (grafana.com/docs/mimir/latest/manage/secure/authentication-and-authorization/); Thanos
# Receive reads `THANOS-TENANT` unless started with `--receive.tenant-header`.
DEFAULT_TENANT_HEADER = "X-Scope-OrgID"
# A tenant id as Mimir allows it (grafana.com/docs/mimir/latest/configure/about-tenant-ids/):
# letters, digits and !-_.*'() up to 150 characters, not "." or "..". One tenant: the same
# header goes with every write, so no `|` list of a federated read.
_TENANT = re.compile(r"[A-Za-z0-9!\-_.*'()]{1,150}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+\-.^_`|~]+")  # an HTTP token (RFC 9110)


@dataclass(frozen=True)
class RemoteWrite:
    url: str = ""  # the receiver's write endpoint; empty: off
    read_url: str = ""  # a Prometheus HTTP API base URL for PromQL reads; empty: none
    bearer_token: str = ""
    username: str = ""
    password: str = ""
    tenant: str = ""  # sent in `tenant_header` to both endpoints; empty: none
    tenant_header: str = DEFAULT_TENANT_HEADER
    batch_samples: int = DEFAULT_BATCH_SAMPLES
    every_s: float = 5.0  # the beat's interval between passes
    timeout_s: float = 30.0  # one request's

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def headers(self) -> dict[str, str]:
        """What both the write and the read endpoint are sent: the Authorization header and
        the tenant's, each if set."""
        out: dict[str, str] = {}
        if self.bearer_token:
            out["Authorization"] = f"Bearer {self.bearer_token}"
        elif self.username:
            pair = f"{self.username}:{self.password}".encode()
            out["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        if self.tenant:
            out[self.tenant_header] = self.tenant
        return out


def check_url(name: str, raw: str) -> str:
    """An http(s) URL with a host, or empty; anything else is an error naming `name`."""
    url = raw.strip()
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not an http(s) URL with a host"
            " (e.g. http://prometheus:9090/api/v1/write)"
        )
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} has a port that is not a number") from None
    return url


def remote_write_from_env() -> RemoteWrite:
    url = check_url("FLEETWATCH_REMOTE_WRITE_URL", env_str("FLEETWATCH_REMOTE_WRITE_URL"))
    read_url = check_url("FLEETWATCH_REMOTE_READ_URL", env_str("FLEETWATCH_REMOTE_READ_URL"))
    token = env_str("FLEETWATCH_REMOTE_WRITE_BEARER_TOKEN")
    username = env_str("FLEETWATCH_REMOTE_WRITE_USERNAME")
    password = env_str("FLEETWATCH_REMOTE_WRITE_PASSWORD")
    if token and (username or password):
        raise ImproperlyConfigured(
            "FLEETWATCH_REMOTE_WRITE_BEARER_TOKEN and FLEETWATCH_REMOTE_WRITE_USERNAME/PASSWORD"
            " are both set: use one kind of credentials"
        )
    if bool(username) != bool(password):
        raise ImproperlyConfigured(
            "FLEETWATCH_REMOTE_WRITE_USERNAME and FLEETWATCH_REMOTE_WRITE_PASSWORD go together"
        )
    tenant = env_str("FLEETWATCH_REMOTE_WRITE_TENANT").strip()
    if tenant and (not _TENANT.fullmatch(tenant) or tenant in (".", "..")):
        raise ImproperlyConfigured(
            f"FLEETWATCH_REMOTE_WRITE_TENANT={tenant!r} is not a tenant id: letters, digits"
            " and !-_.*'(), at most 150 characters, one tenant"
        )
    header = env_str("FLEETWATCH_REMOTE_WRITE_TENANT_HEADER").strip() or DEFAULT_TENANT_HEADER
    if not _HEADER_NAME.fullmatch(header):
        raise ImproperlyConfigured(
            f"FLEETWATCH_REMOTE_WRITE_TENANT_HEADER={header!r} is not an HTTP header name"
        )
    return RemoteWrite(
        url=url,
        read_url=read_url,
        bearer_token=token,
        username=username,
        password=password,
        tenant=tenant,
        tenant_header=header,
        batch_samples=env_int("FLEETWATCH_REMOTE_WRITE_BATCH", DEFAULT_BATCH_SAMPLES, minimum=1),
        every_s=env_float("FLEETWATCH_REMOTE_WRITE_S", 5.0, minimum=1),
        timeout_s=env_float("FLEETWATCH_REMOTE_WRITE_TIMEOUT_S", 30.0, minimum=1),
    )
