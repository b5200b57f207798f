"""Company sign-in: OpenID Connect beside local accounts (mozilla-django-oidc's code flow).

- `discovery.py` finds the provider's endpoints (or takes them from the settings);
- `backend.py` turns a finished sign-in into a Fleetwatch account;
- `roles.py` sets that account's roles from the provider's group claim, at every sign-in;
- `views.py` and `urls.py` start the sign-in and take the provider's answer.

Off unless `FLEETWATCH_OIDC_ISSUER` is set (fleetwatch/oidc_settings.py).
"""

# The two routes' names (urls.py), which the library, the button and the views refer to.
START_URL_NAME = "oidc-sign-in"
CALLBACK_URL_NAME = "oidc-callback"
