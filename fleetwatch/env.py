"""Strict settings helpers: a typo in the environment is an error, not a default.

After healthchecks' `hc/settings.py`: `env_bool("X")` accepts only true/false
spellings and raises ImproperlyConfigured for anything else; `*_FILE` variants
read secrets from files (systemd credentials, Docker/Kubernetes secrets).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str = "") -> str:
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_path}: {exc}") from None
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false, 1/0, yes/no)")


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_float(name: str, default: float, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Comma-separated addresses or networks (`10.0.0.7, 10.1.0.0/16, ::1`); a host address
    is its own /32 (/128). A typo is an error naming the variable and the entry."""
    networks = []
    for entry in (part.strip() for part in env_str(name).split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not an address or network (e.g. 10.0.0.7 or 10.1.0.0/16)"
            ) from None
    return tuple(networks)


def database_from_url(url: str) -> dict[str, object]:
    """`postgres://user:pass@host:port/db?sslmode=...` or `sqlite:///path` → DATABASES entry."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql", "pgsql"):
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    if parts.scheme == "sqlite":
        # sqlite:///rel/path → "rel/path"; sqlite:////abs/path → "/abs/path"
        path = unquote(parts.path)
        return sqlite_database(path[1:] if path.startswith("/") else path)
    raise ImproperlyConfigured(
        f"DATABASE_URL scheme {parts.scheme!r} is not supported (use postgres:// or sqlite:///)"
    )


def sqlite_database(path: str) -> dict[str, object]:
    # WAL lets the web server read while the ingest writer commits; FULL makes
    # an acknowledged batch survive power loss (measured free here: group commit
    # amortises the fsync). IMMEDIATE takes the write lock up front, so two
    # writers queue on busy_timeout instead of failing to upgrade a read lock.
    # 16 KiB pages (effective only when the file is created) inserted the wide
    # sample rows 30-50 % faster than 4 KiB here.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            "init_command": (
                "PRAGMA page_size=16384; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                " PRAGMA busy_timeout=30000;"
            ),
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        },
    }
