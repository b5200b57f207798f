"""Secrets at rest: Slack webhook URLs and Prometheus credentials are stored encrypted
with Fernet under FLEETWATCH_SECRET_KEYS (comma-separated, newest first: the first
encrypts, every one decrypts; rotation: docs/configuration.md, `manage.py rotate_secrets`).

The column holds `fernet:<token>`. Reading the attribute gives the plain text, decrypted
when read, so code that posts or queries uses it as before; everything that copies the row
out — dumpdata, model_to_dict, a row saved with that field untouched — gets the stored
token, never the plain text, and needs no key. A row whose key is no longer configured
still loads (lists, deletes, saves of other fields work); reading its secret raises
`SecretUnreadable`, which names the setting.

Hand-written rather than a package: django-fernet-encrypted-fields derives its keys from
SECRET_KEY and SALT_KEY (rotating SECRET_KEY would touch every secret), not Fernet keys
from the environment; django-encrypted-model-fields was last released in 2022. What
this needs beyond `cryptography` (already a dependency) is short.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, models, transaction
from django.db.models.query_utils import DeferredAttribute

from fleetwatch.secret_keys import SETTING, parse_keys

__all__ = (
    "SETTING",
    "EncryptedCharField",
    "EncryptedURLField",
    "Sealed",
    "SecretError",
    "SecretKeyMissing",
    "SecretUnreadable",
    "decrypt",
    "decrypt_columns",
    "encrypt",
    "encrypt_columns",
    "encrypted_fields",
    "has_secret",
    "is_encrypted",
    "reencrypt",
    "rotate_all",
)

PREFIX = "fernet:"


class SecretError(ImproperlyConfigured):
    """A secret cannot be stored or read with the keys configured."""


class SecretKeyMissing(SecretError):
    def __init__(self) -> None:
        super().__init__(
            f"{SETTING} is not set: Slack webhook URLs and Prometheus credentials are stored"
            " encrypted and need a key (docs/configuration.md, 'Secrets at rest')"
        )


class SecretUnreadable(SecretError):
    def __init__(self, what: str = "a stored secret") -> None:
        super().__init__(
            f"{what} was encrypted with a key that is not in {SETTING}: put that key back"
            " (after the newest), or enter the secret again"
        )

    @classmethod
    def at(cls, where: str) -> SecretUnreadable:
        return cls(f"the secret of {where}")


@dataclass(frozen=True)
class Sealed:
    """A secret as the database holds it: `fernet:<token>`."""

    stored: str

    def __repr__(self) -> str:
        return "Sealed(…)"  # a token is safe to show, but not worth a screenful


def is_encrypted(stored: str) -> bool:
    return stored.startswith(PREFIX)


@lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(k) for k in keys])


def _configured() -> MultiFernet:
    raw = getattr(settings, SETTING, [])
    keys = tuple(parse_keys(raw) if isinstance(raw, str) else raw)
    if not keys:
        raise SecretKeyMissing()
    return _fernet(keys)


def encrypt(plain: str) -> str:
    """The stored form of `plain` under the newest key; empty stays empty ("not set")."""
    if not plain:
        return plain
    return PREFIX + _configured().encrypt(plain.encode()).decode()


def decrypt(stored: str) -> str:
    """The plain text of a stored value; one still in clear (written before encryption,
    or loaded from an old dump) is returned as it is."""
    if not is_encrypted(stored):
        return stored
    try:
        return _configured().decrypt(stored[len(PREFIX) :].encode()).decode()
    except InvalidToken:
        raise SecretUnreadable() from None


def reencrypt(stored: str) -> str:
    """`stored` under the newest key (a clear value is encrypted); for rotate_secrets."""
    if not stored:
        return stored
    if not is_encrypted(stored):
        return encrypt(stored)
    try:
        token = _configured().rotate(stored[len(PREFIX) :].encode())
    except InvalidToken:
        raise SecretUnreadable() from None
    return PREFIX + token.decode()


class _SecretAttribute(DeferredAttribute):
    """Holds what the database gave (a `Sealed`) and decrypts it on each read, so a row
    loads without the key and the plain text never sits in the instance unasked."""

    def __get__(self, instance: Any, cls: Any = None) -> Any:
        value = super().__get__(instance, cls)
        if isinstance(value, Sealed):
            return decrypt(value.stored)
        return value

    def __set__(self, instance: Any, value: Any) -> None:
        instance.__dict__[self.field.attname] = value


class _Encrypted:
    """Mixed into a CharField subclass: validation and forms see the plain text (its
    max_length is the plain text's), the column is text (a token is longer)."""

    descriptor_class = _SecretAttribute
    attname: str

    def get_internal_type(self) -> str:
        return "TextField"

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        if value is not None and is_encrypted(value):
            return Sealed(value)
        return value

    def to_python(self, value: Any) -> Any:
        # dumpdata writes the token; loaddata must keep it, not encrypt it again.
        if isinstance(value, str) and is_encrypted(value):
            return Sealed(value)
        return super().to_python(value)  # type: ignore[misc]

    def get_prep_value(self, value: Any) -> Any:
        if isinstance(value, Sealed):
            return value.stored
        if value is None:
            return None
        return encrypt(str(value))

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        # What was loaded is written back unchanged: saving a row needs no key for a
        # secret nobody touched, and keeps its bytes.
        return model_instance.__dict__.get(self.attname)

    def value_from_object(self, obj: models.Model) -> Any:
        """The stored form: what serialisers and model_to_dict copy out of a row."""
        value = obj.__dict__.get(self.attname)
        if isinstance(value, Sealed):
            return value.stored
        return encrypt(value) if isinstance(value, str) else value

    def value_to_string(self, obj: models.Model) -> str:
        value = self.value_from_object(obj)
        return "" if value is None else str(value)


class EncryptedCharField(_Encrypted, models.CharField):  # type: ignore[type-arg]
    """A CharField stored encrypted (see the module docstring)."""


class EncryptedURLField(_Encrypted, models.URLField):  # type: ignore[type-arg]
    """A URLField stored encrypted (see the module docstring)."""


def has_secret(instance: models.Model, attname: str) -> bool:
    """Whether this secret is set, told without decrypting it."""
    value = instance.__dict__.get(attname)
    return bool(value.stored if isinstance(value, Sealed) else value)


def encrypted_fields() -> Iterator[tuple[type[models.Model], list[str]]]:
    """Every model with encrypted fields, and their names: what rotate_secrets and the
    system check walk."""
    from django.apps import apps

    for model in apps.get_models():
        names = [f.attname for f in model._meta.concrete_fields if isinstance(f, _Encrypted)]
        if names:
            yield model, names


def encrypt_columns(model: type[models.Model], names: Sequence[str]) -> None:
    """For data migrations: encrypt what `model` (a historical model, whose fields are
    still plain text) holds in clear in `names`. Without a key and with something to
    encrypt it raises SecretKeyMissing, and the migration changes nothing."""
    _rewrite_columns(model, names, lambda v: v if is_encrypted(v) else encrypt(v))


def decrypt_columns(model: type[models.Model], names: Sequence[str]) -> None:
    """The reverse of encrypt_columns: back to clear, for unapplying the migration."""
    _rewrite_columns(model, names, decrypt)


def _rewrite_columns(
    model: type[models.Model], names: Sequence[str], change: Callable[[str], str]
) -> None:
    for pk, *values in model._default_manager.values_list("pk", *names):
        new = {n: change(v) for n, v in zip(names, values, strict=True) if v}
        if new:
            model._default_manager.filter(pk=pk).update(**new)


def rotate_all() -> dict[str, int]:
    """Every stored secret re-encrypted under the newest key (one left in clear is
    encrypted), in one transaction: one unreadable secret and nothing changes. Returns
    the secrets rewritten per model."""
    done: dict[str, int] = {}
    with transaction.atomic():
        for model, names in encrypted_fields():
            label = str(model._meta.verbose_name_plural)
            done[label] = 0
            for pk, *values in model._default_manager.values_list("pk", *names):
                new = {}
                for name, value in zip(names, values, strict=True):
                    stored = value.stored if isinstance(value, Sealed) else value
                    if stored:
                        new[name] = Sealed(_rotated(stored, f"{label} {pk}, {name}"))
                if new:
                    model._default_manager.filter(pk=pk).update(**new)
                    done[label] += len(new)
    return done


def _rotated(stored: str, where: str) -> str:
    try:
        return reencrypt(stored)
    except SecretUnreadable as exc:
        raise SecretUnreadable.at(where) from exc


@checks.register(checks.Tags.database)
def check_stored_secrets(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """At `migrate` and `check --database`: every stored secret can be read with the keys
    configured, so a missing or rotated-away key shows before a delivery or pull fails."""
    messages: list[checks.CheckMessage] = []
    for alias in databases or ():
        for model, names in encrypted_fields():
            try:
                rows = list(model._default_manager.using(alias).values_list("pk", *names))
            except DatabaseError:
                continue  # not migrated yet
            messages += _row_messages(model, names, rows)
    return messages


def _row_messages(
    model: type[models.Model], names: list[str], rows: list[tuple[Any, ...]]
) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    for pk, *values in rows:
        where = f"{model._meta.verbose_name} {pk}"
        for name, value in zip(names, values, strict=True):
            if isinstance(value, Sealed):
                try:
                    decrypt(value.stored)
                except SecretError as exc:
                    messages.append(checks.Error(f"{where}, {name}: {exc}", id="fleet.E201"))
            elif value:
                messages.append(
                    checks.Warning(
                        f"{where}, {name} is stored in clear",
                        hint="run: manage.py rotate_secrets",
                        id="fleet.W201",
                    )
                )
    return messages
