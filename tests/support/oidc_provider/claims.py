"""What the test provider says about a person: standard claims from the user, and a
"groups" claim (scope "groups") listing the person's groups at the provider."""

from __future__ import annotations

from typing import Any

from oidc_provider.lib.claims import ScopeClaims  # type: ignore[import-untyped]


def userinfo(claims: dict[str, Any], user: Any) -> dict[str, Any]:
    claims["preferred_username"] = user.username
    claims["email"] = user.email
    claims["given_name"] = user.first_name
    claims["family_name"] = user.last_name
    return claims


class GroupsClaims(ScopeClaims):  # type: ignore[misc]
    info_groups = ("Groups", "The groups you are in.")

    def scope_groups(self) -> dict[str, Any]:
        return {"groups": sorted(self.user.groups.values_list("name", flat=True))}
