"""A small OpenID Connect provider for the company sign-in tests: django-oidc-provider in
a Django project of its own, run as a separate process (serve.py). Not Fleetwatch's
settings: it shares only the Python environment."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent

SECRET_KEY = "test-provider-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.support.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["OIDC_PROVIDER_DB"]}
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast, test only
USE_TZ = True

# Cookies are per host, not per port: named apart from Fleetwatch's on the same 127.0.0.1.
SESSION_COOKIE_NAME = "provider_sessionid"
CSRF_COOKIE_NAME = "provider_csrftoken"

LOGIN_URL = "/login/"
OIDC_USERINFO = "tests.support.oidc_provider.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "tests.support.oidc_provider.claims.GroupsClaims"
