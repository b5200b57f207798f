"""Admin forms for models with encrypted secrets (fleet/secrets.py): a secret is never
shown back; the form says whether one is stored, a new one replaces it, an empty field
keeps it. A secret that cannot be stored or kept (no key, or a key no longer configured)
is a form error that names the setting, and nothing is saved."""

from __future__ import annotations

from typing import Any

from django import forms

from fleet.secrets import SecretError, encrypt, has_secret

__all__ = ("SecretsForm",)


class SecretsForm(forms.ModelForm):  # type: ignore[type-arg]
    """Subclasses list their encrypted fields in `secret_fields`."""

    secret_fields: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self.secret_fields:
            if name not in self.fields:
                continue
            field = self.fields[name]
            field.widget = forms.PasswordInput(render_value=False)
            if self.is_stored(name):
                field.required = False
                field.help_text = f"{self.describe_stored(name)}; leave empty to keep it"
            else:
                field.help_text = "not set"

    def is_stored(self, name: str) -> bool:
        return bool(self.instance.pk) and has_secret(self.instance, name)

    def describe_stored(self, name: str) -> str:
        """How a stored secret is described in its help text (never the secret)."""
        return "stored (not shown)"

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in self.secret_fields:
            if name not in self.fields:
                continue
            try:
                if data.get(name):
                    encrypt(data[name])  # a key to store it with: checked before saving
                elif self.is_stored(name) and not self.clears(name, data):
                    data[name] = getattr(self.instance, name)  # empty: keep what is stored
            except SecretError as exc:
                self.add_error(name, str(exc))
        return data

    def clears(self, name: str, data: dict[str, Any]) -> bool:
        """Whether the form asks to remove the stored secret (none can, by default)."""
        return False
