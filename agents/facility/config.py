"""Facility targets as configuration: one `[[facility.targets]]` TOML table per device.

See docs/facility.md for every key. Secrets never sit in the table itself: they
come from `<secret>_env` (an environment variable) or `<secret>_file` (a file whose
first line is the secret), and `Target`'s repr leaves them out so a log line or a
traceback cannot show them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROTOCOLS = ("redfish", "snmp", "modbus")
METER_ROLES = ("utility", "ups_output", "pdu_output", "it_input", "cooling")
SECRET_NAMES = ("password", "community", "auth_key", "priv_key")
_KNOWN_KEYS = frozenset(
    {
        "name",
        "protocol",
        "address",
        "profile",
        "interval_s",
        "timeout_s",
        "feeds",
        "device",
        "username",
        "auth",
        "verify_tls",
        "ca_file",
        "version",
        "auth_protocol",
        "priv_protocol",
        "context",
        "community",
        "unit_id",
        "budget_w",
    }
    | {f"{s}_env" for s in SECRET_NAMES}
    | {f"{s}_file" for s in SECRET_NAMES}
)
_ENTITY = re.compile(
    r"^(?P<kind>loop|feed|rack|meter):(?P<name>[^/\s]{1,100})(?:/(?P<sub>\S{1,100}))?$"
)


class TargetConfigError(ValueError):
    """A `[[facility.targets]]` table that cannot be used; the message names target and key."""


@dataclass(frozen=True, slots=True)
class Entity:
    """What a target's readings feed: `loop:CDU-2`, `feed:A12/A`, `rack:A12`, `meter:utility`."""

    kind: str  # loop | feed | rack | meter
    name: str  # loop or rack name, or the meter role
    feed: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}" + (f"/{self.feed}" if self.feed else "")

    def keys(self) -> dict[str, str]:
        """The entity keys of a protocol sample of this kind."""
        if self.kind == "feed":
            return {"rack": self.name, "feed": self.feed or ""}
        if self.kind in ("loop", "rack"):
            return {self.kind: self.name}
        return {}


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    protocol: str
    address: str
    profile: str
    feeds: Entity
    interval_s: float = 10.0
    timeout_s: float = 3.0
    options: dict[str, Any] = field(default_factory=dict)  # protocol-specific, no secrets
    secrets: dict[str, str] = field(default_factory=dict, repr=False)

    def option(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)


def parse_target(table: dict[str, Any], environ: dict[str, str] | None = None) -> Target:
    """Validate one TOML table; raise TargetConfigError naming the target and the key."""
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise TargetConfigError("facility target without a `name`")
    where = f"facility target {name!r}"
    for secret in ("password", "auth_key", "priv_key"):
        if secret in table:
            raise TargetConfigError(f"{where}: put `{secret}` in {secret}_env or {secret}_file")
    unknown = sorted(set(table) - _KNOWN_KEYS)
    if unknown:
        raise TargetConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    protocol = _required_str(table, "protocol", where)
    if protocol not in PROTOCOLS:
        raise TargetConfigError(f"{where}: protocol must be one of {', '.join(PROTOCOLS)}")
    feeds = parse_entity(_required_str(table, "feeds", where), where)
    address = _required_str(table, "address", where)
    if "@" in address.split("/")[2 if "://" in address else 0]:
        raise TargetConfigError(f"{where}: no credentials in `address`; use username/password_env")
    options = {k: v for k, v in table.items() if k not in _TOP_LEVEL and not _is_secret_key(k)}
    return Target(
        name=name,
        protocol=protocol,
        address=address,
        profile=_required_str(table, "profile", where),
        feeds=feeds,
        interval_s=_positive(table, "interval_s", 10.0, where),
        timeout_s=_positive(table, "timeout_s", 3.0, where),
        options=options,
        secrets=_secrets(table, where, os.environ if environ is None else environ),
    )


_TOP_LEVEL = frozenset(
    {"name", "protocol", "address", "profile", "feeds", "interval_s", "timeout_s"}
)


def parse_entity(text: str, where: str = "facility target") -> Entity:
    match = _ENTITY.match(text)
    if match is None:
        raise TargetConfigError(
            f"{where}: feeds must look like loop:CDU-2, feed:A12/A, rack:A12 or meter:utility"
        )
    kind, name, sub = match["kind"], match["name"], match["sub"]
    if kind == "feed" and not sub:
        raise TargetConfigError(f"{where}: a feed is rack/feed, e.g. feed:A12/A")
    if kind != "feed" and sub:
        raise TargetConfigError(f"{where}: only feed: takes a /<feed> part")
    if kind == "meter" and name not in METER_ROLES:
        raise TargetConfigError(f"{where}: meter role must be one of {', '.join(METER_ROLES)}")
    return Entity(kind, name, sub)


def _is_secret_key(key: str) -> bool:
    return any(key in (f"{s}_env", f"{s}_file") for s in SECRET_NAMES)


def _secrets(table: dict[str, Any], where: str, environ: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for secret in SECRET_NAMES:
        env_name, file_name = table.get(f"{secret}_env"), table.get(f"{secret}_file")
        if env_name is not None:
            if env_name not in environ:
                raise TargetConfigError(f"{where}: environment variable {env_name} is not set")
            found[secret] = str(environ[env_name])
        elif file_name is not None:
            try:
                lines = Path(str(file_name)).read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise TargetConfigError(
                    f"{where}: cannot read {secret}_file: {exc.strerror}"
                ) from None
            found[secret] = lines[0].strip() if lines else ""
    return found


def _required_str(table: dict[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise TargetConfigError(f"{where}: `{key}` is required (a string)")
    return value


def _positive(table: dict[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if type(value) not in (int, float) or value <= 0:
        raise TargetConfigError(f"{where}: `{key}` must be a positive number of seconds")
    return float(value)
