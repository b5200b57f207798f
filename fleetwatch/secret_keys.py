"""FLEETWATCH_SECRET_KEYS: the Fernet keys that encrypt secrets at rest (fleet/secrets.py).

Read by the settings, so nothing here imports Django's models. Comma-separated keys, newest
first: the first encrypts, every one decrypts (rotation: docs/configuration.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

SETTING = "FLEETWATCH_SECRET_KEYS"


def parse_keys(raw: str) -> list[str]:
    """The keys in `raw`, each checked: a key that is not a Fernet key is an error now,
    not a failed decryption the first time a route posts."""
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except ValueError:
            raise ImproperlyConfigured(
                f"{SETTING}: key {position} is not a Fernet key (32 url-safe base64-encoded"
                ' bytes); make one with: python -c "from cryptography.fernet import Fernet;'
                ' print(Fernet.generate_key().decode())"'
            ) from None
    return keys


def local_key(path: Path) -> str:
    """The demo's key: made once in `path` (readable by its owner only) and read back
    afterwards. Web server, worker and beat start together: each writes a candidate
    aside and links it into place, which only the first can do, so all read one key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        candidate = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(Fernet.generate_key().decode() + "\n")
        try:
            os.link(candidate, path)
        except FileExistsError:
            pass  # another process made it first: use theirs
        finally:
            candidate.unlink()
    keys = parse_keys(path.read_text())
    if not keys:
        raise ImproperlyConfigured(f"{path} holds no key: delete it and start again")
    return keys[0]
