"""Fleetwatch settings, all from the environment (see docs/configuration.md).

Embedded default: SQLite in `var/`, in-memory channel layer, Celery over kombu's
filesystem transport. `DATABASE_URL` and `REDIS_URL` switch to PostgreSQL and
Redis, the production shape.
"""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from fleetwatch.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_networks,
    env_str,
    sqlite_database,
)
from fleetwatch.resources import DEFAULT_VAR_DIR, STATIC_DIR, TEMPLATES_DIR

VAR_DIR = Path(env_str("FLEETWATCH_VAR_DIR", str(DEFAULT_VAR_DIR)))

DEMO = env_bool("FLEETWATCH_DEMO", False)
DEBUG = env_bool("DEBUG", False)
TESTING = env_bool("FLEETWATCH_TESTING", False)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEMO:
        # DEBUG never supplies a key: a debug server reachable by others, signing sessions
        # with a key printed in this file, would let anyone forge a sign-in.
        raise ImproperlyConfigured(
            "SECRET_KEY is required (or SECRET_KEY_FILE), also with DEBUG=1; only the demo "
            "(FLEETWATCH_DEMO=1) runs without one. Make one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    SECRET_KEY = "fleetwatch-demo-only-not-secret"

ALLOWED_HOSTS = [h for h in env_str("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
CSRF_FAILURE_VIEW = "fleetwatch.errors.csrf_failure"
CSRF_TRUSTED_ORIGINS = [o for o in env_str("CSRF_TRUSTED_ORIGINS").split(",") if o]


def _proxy_ssl_header(raw: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto: https` (the header the TLS proxy sets, and its value for
    HTTPS) as Django's SECURE_PROXY_SSL_HEADER; unset: requests are taken as they come."""
    if not raw.strip():
        return None
    name, sep, value = raw.partition(":")
    if not sep or not name.strip() or not value.strip():
        raise ImproperlyConfigured(
            f"FLEETWATCH_PROXY_SSL_HEADER={raw!r}: use 'Header-Name: value', "
            "e.g. 'X-Forwarded-Proto: https'"
        )
    return "HTTP_" + name.strip().upper().replace("-", "_"), value.strip()


def _refuse_retired_https_switches() -> None:
    """These switches once turned https on; it is the default now. One left at false in an
    environment file meant plain http: say what means that today, rather than ignore it."""
    for name in ("FLEETWATCH_SECURE_COOKIES", "FLEETWATCH_SSL_REDIRECT"):
        if not env_bool(name, True):
            raise ImproperlyConfigured(
                f"{name} is gone: https is the default; FLEETWATCH_PLAIN_HTTP=1 serves plain "
                "http (the demo, a test server)"
            )


# Production is the default shape (docs/operations.md, "Security"): https only, Secure
# cookies, HSTS, behind a TLS proxy. Plain http is one explicit switch, which `make demo`
# and the test servers set: there a Secure cookie would never come back.
PLAIN_HTTP = env_bool("FLEETWATCH_PLAIN_HTTP", False)
_refuse_retired_https_switches()
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header(env_str("FLEETWATCH_PROXY_SSL_HEADER"))
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = not PLAIN_HTTP
SECURE_SSL_REDIRECT = not PLAIN_HTTP
# Load balancers and probes ask the server itself over plain http (fleetwatch/health.py).
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env_int(
    "FLEETWATCH_HSTS_SECONDS", 0 if PLAIN_HTTP else 365 * 24 * 3600, minimum=0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("FLEETWATCH_HSTS_INCLUDE_SUBDOMAINS", not PLAIN_HTTP)
SECURE_HSTS_PRELOAD = env_bool("FLEETWATCH_HSTS_PRELOAD", not PLAIN_HTTP)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "fleet",
    "fleet.alerts",
    "fleet.notifications",
    "fleet.ingest.prometheus",
    "dashboard",
]

MIDDLEWARE = [
    # Before the https redirect, which it would otherwise loop (fleetwatch/proxy.py).
    "fleetwatch.proxy.ProxyHeaderMissingMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Closed by default: every view needs a sign-in unless it is on the one list of public
    # views (fleetwatch/public.py), and a signed-in person with no role sees only whom to
    # ask (dashboard/no_role.py).
    "fleetwatch.public.SignInRequiredMiddleware",
    "dashboard.no_role.NoRoleMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "fleetwatch.urls"
ASGI_APPLICATION = "fleetwatch.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [TEMPLATES_DIR],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": database_from_url(DATABASE_URL)}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {"default": sqlite_database(str(VAR_DIR / "fleetwatch.sqlite3"))}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")


def _redis_layer_host(url: str) -> dict[str, object]:
    """A Redis that restarted leaves dead connections in the pool: retry a command once
    on a fresh one, so the first page to reconnect afterwards is not answered 500."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return {
        "address": url,
        "retry": Retry(NoBackoff(), 1),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
    }


if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [_redis_layer_host(REDIS_URL)], "capacity": 1000, "expiry": 10},
        }
    }
else:
    # One process serves HTTP and WebSockets in the embedded shape, so an
    # in-memory layer reaches every browser. Ingest writers hand live updates
    # back to their server process rather than using the layer themselves.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Django's cache, for what one process computes and every other reads: a site's forecasts
# (fleet/read/forecast_now.py), computed once a minute by the task fleet.forecasts and read
# by web servers, live publishers and the rules worker. Django's default cache lives in each
# process's memory, so it must be one the installation's processes share: Redis where there
# is one (REDIS_URL's own database, like the broker and channel layer, so each test server's
# private Redis database holds its own), else files in VAR_DIR (one host, like the embedded
# tier's broker).
if REDIS_URL:
    CACHES: dict[str, dict[str, object]] = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "fleetwatch",
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
            # Past MAX_ENTRIES a write deletes a third of the files, live ones too; the
            # default (300) is fewer than an installation's sites may be.
            "OPTIONS": {"MAX_ENTRIES": 10_000},
        }
    }

# Celery: Redis when REDIS_URL is set; otherwise kombu's filesystem transport,
# which works across processes on one host with no server to install.
CELERY_QUEUE_DIR = VAR_DIR / "celery"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"visibility_timeout": 3600}
else:
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_QUEUE_DIR / "queue"),
        "data_folder_out": str(CELERY_QUEUE_DIR / "queue"),
        "processed_folder": str(CELERY_QUEUE_DIR / "processed"),
        # kombu's default is ./control, relative to whatever directory the worker runs in
        "control_folder": str(CELERY_QUEUE_DIR / "control"),
        "store_processed": False,
        # kombu polls the folder each 1 s by default: a 1 s evaluation tick (expiring in
        # 0.9 s) could wait longer than its life and be discarded as revoked (seen in CI).
        "polling_interval": 0.1,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"

# Storage tiers: retention per tier (hours). Defaults keep a 512-GPU, 64-node
# demo at 1 Hz near 3.3 GB on SQLite (measured: docs/storage.md).
RETENTION_RAW_HOURS = env_float("FLEETWATCH_RETENTION_RAW_HOURS", 3, minimum=0.1)
RETENTION_1M_HOURS = env_float("FLEETWATCH_RETENTION_1M_HOURS", 72, minimum=1)
RETENTION_1H_HOURS = env_float("FLEETWATCH_RETENTION_1H_HOURS", 24 * 90, minimum=1)
# Hourly rack, feed, loop and facility history: 400 days, so the 12 months before any day of
# the current month are there for an annual PUE (ISO/IEC 30134-2). GPU and node hours above.
RETENTION_FACILITY_1H_HOURS = env_float(
    "FLEETWATCH_RETENTION_FACILITY_1H_HOURS", 24 * 400, minimum=1
)

# The disk the database lives on, GB (decimal), where Fleetwatch cannot see it itself: a
# PostgreSQL server on another host (docs/forecast.md, "The database's disk"). 0: unknown.
DATABASE_DISK_GB = env_float("FLEETWATCH_DATABASE_DISK_GB", 0, minimum=0)

# Ingest: child processes per server process (PostgreSQL can take two).
INGEST_WRITERS = env_int("FLEETWATCH_INGEST_WRITERS", 1, minimum=1)
# How often live pages are pushed what changed (s).
LIVE_INTERVAL_S = env_float("FLEETWATCH_LIVE_INTERVAL_S", 0.5, minimum=0.05)
# How often an ingest child merges what changed into the latest-state tables (s).
LATEST_SAVE_S = env_float("FLEETWATCH_LATEST_SAVE_S", LIVE_INTERVAL_S, minimum=0.05)
# How often an ingest child re-checks its connections' tokens for revocation (s).
REVALIDATE_S = env_float("FLEETWATCH_REVALIDATE_S", 5, minimum=0.1)
# A commit waiting longer than this for a PostgreSQL lock is answered 503 (ms).
PG_LOCK_TIMEOUT_MS = env_int("FLEETWATCH_PG_LOCK_TIMEOUT_MS", 10_000, minimum=1)
# Failed token checks one client may make per minute before enrolment and HTTP ingest
# answer it 429 (fleet/ingest/guard.py).
AUTH_FAILURES_PER_MIN = env_int("FLEETWATCH_AUTH_FAILURES_PER_MIN", 30, minimum=1)
# A live page's socket is ended this often so its session is checked again (s).
LIVE_REAUTH_S = env_float("FLEETWATCH_LIVE_REAUTH_S", 300, minimum=1)

# Alerts: how often the rules are evaluated (s); each tick expires before the next.
ALERT_EVAL_S = env_float("FLEETWATCH_ALERT_EVAL_S", 10, minimum=1)
# How often the alert pipeline checks itself (fleet/alerts/watchdog.py; the beat reads it).
ALERT_WATCHDOG_S = 30.0
# A group's new places are announced at most this often after its first message (s).
ALERT_GROUP_INTERVAL_S = env_float("FLEETWATCH_ALERT_GROUP_INTERVAL_S", 60, minimum=0)
# A group firing unacknowledged is announced again this often, unless its rule says (s).
ALERT_REPEAT_S = env_float("FLEETWATCH_ALERT_REPEAT_S", 4 * 3600, minimum=60)

# /metrics (fleet/read/metrics/views.py): closed unless a scrape sends the bearer token or
# comes from an allowed address (addresses or networks, comma-separated); PUBLIC opens it
# to anyone (the demo). Which sites get per-GPU series: "all", "none", or comma-separated
# site slugs (racks, loops, feeds and sites always).
METRICS_TOKEN = env_str("FLEETWATCH_METRICS_TOKEN")
METRICS_ALLOW = env_networks("FLEETWATCH_METRICS_ALLOW")
METRICS_PUBLIC = env_bool("FLEETWATCH_METRICS_PUBLIC", False)
METRICS_GPU_SITES = env_str("FLEETWATCH_METRICS_GPU_SITES", "all")
# How often the enabled Prometheus sources are pulled (s) (fleet/ingest/prometheus/pull.py).
PROMETHEUS_PULL_S = env_float("FLEETWATCH_PROMETHEUS_PULL_S", 15, minimum=1)
# Remote write of raw samples to a Prometheus-compatible TSDB, and PromQL reads of ranges older
# than raw retention (fleet/remote_write/; docs/configuration.md, "Remote write"). Off unless
# FLEETWATCH_REMOTE_WRITE_URL is set.
from fleetwatch.remote_write_settings import remote_write_from_env  # noqa: E402

REMOTE_WRITE = remote_write_from_env()

# Whom a signed-in person with no role is told to ask for access (dashboard/no_role.py),
# e.g. "the NOC, #dc-ops on Slack"; unset: the admins' names and e-mail addresses.
ACCESS_CONTACT = env_str("FLEETWATCH_ACCESS_CONTACT")

SLACK_WEBHOOK_URL = env_str("SLACK_WEBHOOK_URL")
# Where people reach this Fleetwatch (e.g. https://fleet.example.com): alert messages link
# to it. Unset: messages carry no dashboard button (Slack refuses relative links).
FLEETWATCH_BASE_URL = env_str("FLEETWATCH_BASE_URL")
# A Slack delivery being sent is leased this long (s); past it, a sender is taken for dead
# and the delivery is sent again. Keep it above the 10 s send timeout (tests shorten it).
DELIVERY_LEASE_S = env_float("FLEETWATCH_DELIVERY_LEASE_S", 30, minimum=1)

# Reference no-op ingest routes for bench/ingest.py only.
BENCH_ROUTES = env_bool("FLEETWATCH_BENCH_ROUTES", False)

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [STATIC_DIR]
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# WhiteNoise serves static files from the ASGI server itself; with finders it
# needs no collectstatic step, which keeps `make demo` and tests to one command.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

LOGIN_URL = "/admin/login/"
LOGIN_REDIRECT_URL = "/"

# Company sign-in (OpenID Connect) beside local accounts: off unless FLEETWATCH_OIDC_ISSUER
# is set (fleetwatch/oidc_settings.py; docs/configuration.md, "Company sign-in").
from fleetwatch.oidc_settings import authentication_backends, oidc_from_env  # noqa: E402

OIDC_SIGN_IN = oidc_from_env()
AUTHENTICATION_BACKENDS = authentication_backends(OIDC_SIGN_IN)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

# Secrets at rest (fleet/secrets.py; docs/configuration.md, "Secrets at rest"): the Fernet
# keys that encrypt Slack webhook URLs and Prometheus credentials in the database,
# comma-separated, newest first. Unset, the demo, DEBUG and the benches (TESTING) make one
# in VAR_DIR/secret-key; production without it can store no such secret (an error).
from fleetwatch.secret_keys import local_key, parse_keys  # noqa: E402

FLEETWATCH_SECRET_KEYS = parse_keys(env_str("FLEETWATCH_SECRET_KEYS"))
if not FLEETWATCH_SECRET_KEYS and (DEMO or DEBUG or TESTING):
    FLEETWATCH_SECRET_KEYS = [local_key(VAR_DIR / "secret-key")]
