"""Settings for development, the demo and tests. Production: ``portal.settings_production``.

Everything comes from the environment with safe local defaults. With nothing set, ``make demo``
and ``make test`` export ``DATABASE_URL`` / ``REDIS_URL`` pointing at the embedded PostgreSQL
and Redis they start; a shell started while the demo runs picks them up from
``$DATA_DIR/devstack.env``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from .env import celery_broker_url, env, secret

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env.str("DATA_DIR", default=str(BASE_DIR / ".data")))

# Values exported by a running `make demo` (never overrides the real environment).
if (DATA_DIR / "devstack.env").exists():
    env.read_env(str(DATA_DIR / "devstack.env"), overwrite=False)

DEBUG = env.bool("DEBUG", default=True)
SECRET_KEY = secret("SECRET_KEY") or "insecure-dev-key-only-for-local-demo-and-tests"
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "portal",
    "inventory",
    "quotas",
    "mig",
    "nodelabels",
    "telemetry",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A record per request of telemetry sources that did not answer (the banner).
    "telemetry.sources.OutageMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "telemetry.sources.outages_context",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default="postgres://postgres@localhost:5432/portal"),
}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A database that does not answer is a 503 within seconds, not a hung request (#24).
DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
    "connect_timeout", env.int("DB_CONNECT_TIMEOUT", default=5)
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="redis://localhost:6379/0")
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "portal",
        # A Redis that is down or stopped answers within these (the rate limits read it on
        # every member write): 503 with Retry-After, not a request that hangs (#24).
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}
# /api/schema/ and /api/docs/ for anonymous callers too (default: signed-in users and API
# tokens only; portal/apidocs.py).
API_DOCS_PUBLIC = env.bool("API_DOCS_PUBLIC", default=False)
# What a 503 for a dependency that does not answer tells clients to wait (portal/outages.py).
OUTAGE_RETRY_AFTER_SECONDS = env.int("OUTAGE_RETRY_AFTER_SECONDS", default=10)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "inventory:fleet"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.rest.Pagination",
    "DEFAULT_FILTER_BACKENDS": [
        "portal.filtering.StrictFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "portal.schema.PortalAutoSchema",
    "EXCEPTION_HANDLER": "portal.rest.exception_handler",
    "DEFAULT_THROTTLE_RATES": {"token": env.str("TOKEN_THROTTLE_RATE", default="30/min")},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU quota portal API",
    "DESCRIPTION": "Fleet inventory, GPU quota requests and grants. "
    "Authenticate with `Authorization: Bearer <token>` (POST /api/v1/auth/token/).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # 3.1: JSON Schema proper, so a schema can say what a body's keys may be
    # (``propertyNames``: node label keys, MIG profiles; #24 finding 9).
    "OAS_VERSION": "3.1.0",
    # Swagger UI served from our static files (sidecar), not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two serializers have a "level" field with different choices: name each set.
    "ENUM_NAME_OVERRIDES": {"PreflightLevelEnum": ["ok", "warning", "error"]},
}

# Celery: broker is Redis; job state lives in Postgres rows, so no result backend.
CELERY_BROKER_URL = celery_broker_url(REDIS_URL)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A send is one attempt within these timeouts; after a failure a process skips sending
# for BROKER_DOWN_SECONDS and beat re-sends the committed outbox rows (portal/broker.py).
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2, "socket_timeout": 5}
BROKER_DOWN_SECONDS = env.float("BROKER_DOWN_SECONDS", default=10)
CELERY_TIMEZONE = TIME_ZONE
INVENTORY_SYNC_INTERVAL = env.int("INVENTORY_SYNC_INTERVAL", default=30)
# Where the watcher (manage.py watch_inventory) keeps a cluster current, the periodic sync
# leaves it alone and the watcher relists itself this often, as a safety net.
INVENTORY_RESYNC_INTERVAL = env.int("INVENTORY_RESYNC_INTERVAL", default=600)
# Ended GPU pod runs (allocated GPU-hours where no telemetry is sent) are kept this long:
# showback offers the current month and the twelve before it.
POD_RUN_RETENTION_DAYS = env.int("POD_RUN_RETENTION_DAYS", default=400)
CELERY_BEAT_SCHEDULE = {
    "inventory-sync-all": {
        "task": "inventory.tasks.sync_all_clusters",
        "schedule": timedelta(seconds=INVENTORY_SYNC_INTERVAL),
    },
    "quotas-redispatch-operations": {
        "task": "quotas.tasks.redispatch_operations",
        "schedule": timedelta(seconds=env.int("QUOTA_REDISPATCH_INTERVAL", default=2)),
    },
    "quotas-grant-windows": {
        "task": "quotas.tasks.process_grant_windows",
        "schedule": timedelta(seconds=env.int("QUOTA_WINDOW_INTERVAL", default=60)),
    },
    "nodelabels-redispatch": {
        "task": "nodelabels.tasks.redispatch_label_operations",
        "schedule": timedelta(seconds=env.int("NODELABEL_REDISPATCH_INTERVAL", default=15)),
    },
    "nodelabels-reconcile": {
        "task": "nodelabels.tasks.reconcile_node_labels",
        "schedule": timedelta(seconds=env.int("NODELABEL_RECONCILE_INTERVAL", default=120)),
    },
    "mig-redispatch": {
        "task": "mig.tasks.redispatch_mig_runs",
        "schedule": timedelta(seconds=env.int("MIG_REDISPATCH_INTERVAL", default=30)),
    },
    "telemetry-rollup": {
        "task": "telemetry.tasks.rollup_history",
        "schedule": timedelta(minutes=10),
    },
    "telemetry-expire": {
        "task": "telemetry.tasks.expire_history",
        "schedule": timedelta(minutes=10),
    },
    # The latest GPU state of clusters whose telemetry comes from Prometheus (issue #13).
    "telemetry-prometheus": {
        "task": "telemetry.tasks.sync_prometheus",
        "schedule": timedelta(seconds=60),
    },
    # What the telemetry pages show, computed per cluster before anyone asks (issue #23).
    "telemetry-summaries": {
        "task": "telemetry.tasks.refresh_summaries",
        "schedule": timedelta(seconds=env.int("TELEMETRY_SUMMARY_INTERVAL_SECONDS", default=60)),
    },
    # Idle grants under a reclaim policy (issue #25 section 2): hourly usage rows change
    # every few minutes, so a pass every 10 minutes is early enough.
    "telemetry-reclaim": {
        "task": "telemetry.tasks.reclaim_idle_grants",
        "schedule": timedelta(seconds=env.int("RECLAIM_INTERVAL_SECONDS", default=600)),
    },
    "quotas-reconcile": {
        "task": "quotas.tasks.reconcile_quotas",
        "schedule": timedelta(seconds=env.int("QUOTA_RECONCILE_INTERVAL", default=120)),
    },
    # Ended pod runs older than any showback month (inventory/podruns.py).
    "inventory-prune-pod-runs": {
        "task": "inventory.tasks.prune_pod_runs",
        "schedule": timedelta(hours=6),
    },
    "inventory-recheck-permissions": {
        "task": "inventory.tasks.recheck_permissions",
        "schedule": timedelta(seconds=env.int("PERMISSION_RECHECK_INTERVAL", default=600)),
    },
}

# Quotas.
QUOTA_NAME = env.str("QUOTA_NAME", default="gpu-portal-quota")
QUOTA_MAX_DURATION_DAYS = env.int("QUOTA_MAX_DURATION_DAYS", default=90)
# How far ahead a request may start (#24: a request starting in 2099 was accepted).
QUOTA_MAX_START_DAYS = env.int("QUOTA_MAX_START_DAYS", default=365)
QUOTA_REMINDER_DAYS = env.int("QUOTA_REMINDER_DAYS", default=3)
# A booking (a grant that starts later) is announced to its team this long before its start.
QUOTA_START_REMINDER_HOURS = env.int("QUOTA_START_REMINDER_HOURS", default=24)
# State that tells the truth after a fault (issue #11 section 4): a claimed operation's
# lease, renewed by a heartbeat every third of it (quotas/leases.py), so a dead worker's
# operation is reclaimed within about this long; and members' pending requests per team.
QUOTA_OPERATION_LEASE_SECONDS = env.int("QUOTA_OPERATION_LEASE_SECONDS", default=5)
# Every Kubernetes call of one attempt of a quota operation ends within this (retries
# included): a cluster that does not answer fails the attempt in time, and the operation
# says "cluster unreachable since ..." (quotas/apply.py attempt_gateway).
QUOTA_ATTEMPT_SECONDS = env.float("QUOTA_ATTEMPT_SECONDS", default=30.0)
QUOTA_MAX_PENDING_PER_TEAM = env.int("QUOTA_MAX_PENDING_PER_TEAM", default=20)
# Kueue enforcement (docs/quotas.md, "Kueue"): the portal's objects are named with this
# prefix (ResourceFlavor gpu-portal-<class>, ClusterQueue gpu-portal-<team>); the LocalQueue
# in each team namespace is named KUEUE_LOCAL_QUEUE ("default" also catches pods without
# the kueue.x-k8s.io/queue-name label). Kueue admits a workload only when every resource it
# requests is covered, so the ClusterQueues also cover KUEUE_OTHER_RESOURCES (resource=
# quantity) with a flavor without node labels; empty it when Kueue's
# resources.excludeResourcePrefixes already leaves them out.
KUEUE_NAME_PREFIX = env.str("KUEUE_NAME_PREFIX", default="gpu-portal-")
KUEUE_LOCAL_QUEUE = env.str("KUEUE_LOCAL_QUEUE", default="default")
KUEUE_OTHER_RESOURCES = env.dict("KUEUE_OTHER_RESOURCES", default={"cpu": "100k", "memory": "1Pi"})
QUOTA_CONFIRM_SECONDS = env.float("QUOTA_CONFIRM_SECONDS", default=5.0)
# How long the applying task itself watches for status.hard before a confirm task takes
# over (the quota controller writes it within milliseconds; 0: hand over at once).
QUOTA_CONFIRM_INLINE_SECONDS = env.float("QUOTA_CONFIRM_INLINE_SECONDS", default=1.0)
# Node label drift checks read managed nodes one by one up to this many per cluster,
# and with one paged list of all nodes above it.
NODELABEL_GET_NODE_LIMIT = env.int("NODELABEL_GET_NODE_LIMIT", default=50)

# Telemetry insight (docs/telemetry.md): an allocation is idle when its GPUs stay under
# the threshold for the window; a MIG change pending longer than this is "stuck".
TELEMETRY_IDLE_THRESHOLD_PCT = env.float("TELEMETRY_IDLE_THRESHOLD_PCT", default=5)
TELEMETRY_IDLE_WINDOW_HOURS = env.float("TELEMETRY_IDLE_WINDOW_HOURS", default=2)
TELEMETRY_MIG_STUCK_MINUTES = env.int("TELEMETRY_MIG_STUCK_MINUTES", default=30)
# Held, busy and idle figures are computed per cluster this often by the beat
# (telemetry.summary); a page that finds a cluster's older than the max age (the beat
# stopped) computes it itself.
TELEMETRY_SUMMARY_INTERVAL_SECONDS = env.int("TELEMETRY_SUMMARY_INTERVAL_SECONDS", default=60)
TELEMETRY_SUMMARY_MAX_AGE_SECONDS = env.int("TELEMETRY_SUMMARY_MAX_AGE_SECONDS", default=300)
# ... and the GPU-hours per namespace and hour (showback) are rewritten this often.
TELEMETRY_USAGE_INTERVAL_SECONDS = env.int("TELEMETRY_USAGE_INTERVAL_SECONDS", default=300)
# Hours of GPU-hours each of the beat's computations fills before the rows begin, back to
# the hourly points' retention (telemetry/summary.py, _backfill; doubled after a span
# without history).
TELEMETRY_USAGE_BACKFILL_HOURS = env.int("TELEMETRY_USAGE_BACKFILL_HOURS", default=24)

# MIG reconfiguration (the coordinator, docs/mig.md).
# The ConfigMap the GPU Operator's ClusterPolicy names in spec.migManager.config.name.
MIG_CONFIGMAP_NAME = env.str("MIG_CONFIGMAP_NAME", default="gpu-quota-portal-mig-config")
MIG_CONFIGMAP_NAMESPACE = env.str("MIG_CONFIGMAP_NAMESPACE", default="gpu-operator")
MIG_DRAIN_TIMEOUT_SECONDS = env.float("MIG_DRAIN_TIMEOUT_SECONDS", default=1800)
MIG_STATE_TIMEOUT_SECONDS = env.float("MIG_STATE_TIMEOUT_SECONDS", default=900)
MIG_REBOOT_TIMEOUT_SECONDS = env.float("MIG_REBOOT_TIMEOUT_SECONDS", default=1800)
MIG_POLL_SECONDS = env.float("MIG_POLL_SECONDS", default=5)
MIG_LEASE_SECONDS = env.float("MIG_LEASE_SECONDS", default=300)
MIG_REDISPATCH_GRACE_SECONDS = env.float("MIG_REDISPATCH_GRACE_SECONDS", default=30)
MIG_STEP_MAX_ERRORS = env.int("MIG_STEP_MAX_ERRORS", default=8)
MIG_UNCORDON_ON_FAILURE = env.bool("MIG_UNCORDON_ON_FAILURE", default=True)
MIG_CONFIG_MOUNT_SECONDS = env.float("MIG_CONFIG_MOUNT_SECONDS", default=90)
MIG_RELABEL_ATTEMPTS = env.int("MIG_RELABEL_ATTEMPTS", default=3)
MIG_DEVICES_TIMEOUT_SECONDS = env.float("MIG_DEVICES_TIMEOUT_SECONDS", default=300)

PORTAL_URL = env.str("PORTAL_URL", default="http://127.0.0.1:8000")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="gpu-portal@localhost")

# Inventory sync tuning.
INVENTORY_PAGE_SIZE = env.int("INVENTORY_PAGE_SIZE", default=500)
# A cluster whose last good sync is older than this many intervals is shown as stale.
INVENTORY_STALE_AFTER = timedelta(seconds=INVENTORY_SYNC_INTERVAL * env.int("STALE_FACTOR", 4))
KUBE_REQUEST_TIMEOUT = env.float("KUBE_REQUEST_TIMEOUT", default=30.0)
# A cluster's credential files (kubeconfig, bearer token file) are read only below these
# directories: where Kubernetes mounts Secrets, and the data directory's credentials/ (the
# demo's portal kubeconfigs; not the data directory itself, which holds other secrets). An
# admin form cannot make the portal read any other host file (#24).
CLUSTER_CREDENTIAL_DIRS = env.list(
    "CLUSTER_CREDENTIAL_DIRS", default=["/var/run/secrets", str(DATA_DIR / "credentials")]
)
# Hosts a token cluster's api_url may name with plain http:// (the token travels in clear
# text: a test cluster on localhost, say). Every other api_url is https.
CLUSTER_HTTP_HOSTS = env.list("CLUSTER_HTTP_HOSTS", default=[])
# The connection preflight asks while an admin waits: a short timeout, no retries.
PREFLIGHT_REQUEST_TIMEOUT = env.float("PREFLIGHT_REQUEST_TIMEOUT", default=10.0)

# The demo cluster's kubeconfig (written by the simulated cluster); used by seed_demo.
SIM_KUBECONFIG = env.str("SIM_KUBECONFIG", default=str(DATA_DIR / "kubeconfig"))

# Prometheus scrapes /metrics with this bearer token; without one, only development
# (DEBUG) and staff sessions may read it.
METRICS_TOKEN = secret("METRICS_TOKEN") or ""

EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(levelname)-7s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "kubernetes": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
    },
}

# Hostile input answers 4xx, never 5xx (issue #11 section 2): portal/validation.py.
# JSON bodies: bounded size (413), depth and no NUL / lone surrogates (400).
# The API reads JSON only: forms cannot say null or nest, so a form body could not mean what
# the schema promises (#24 finding 9); the pages post their forms to the HTML views.
REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"] = ["portal.parsers.JSONParser"]
REST_FRAMEWORK["TEST_REQUEST_DEFAULT_FORMAT"] = "json"
API_JSON_MAX_DEPTH = env.int("API_JSON_MAX_DEPTH", default=32)
# NUL in URLs -> 400; oversized bodies on /api/ -> JSON 413 (after SecurityMiddleware).
MIDDLEWARE.insert(1, "portal.middleware.InputGuardMiddleware")
# Every operation documents the statuses any request may get (401, 413, 429, ...).
SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"] = [
    "drf_spectacular.hooks.postprocess_schema_enums",
    "portal.rest.document_common_errors",
    "portal.schema.any_value_may_be_null",
]

# Sign-in throttling (issue #11 section 1): portal/signin/, docs/security.md "Sign-in".
# django-axes counts failed password checks on every path (sign-in page, Django admin, API
# token endpoint) and locks out an account (from any address) and an address (for any
# account) once its failures within the cool-off reach the limit; a locked-out client is
# refused before the password hasher runs, with 429 and Retry-After.
INSTALLED_APPS += ["axes", "portal.signin"]
MIDDLEWARE.append("axes.middleware.AxesMiddleware")
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Proxies whose X-Forwarded-For is believed (addresses or CIDR networks, comma-separated).
# Empty (the default): none, the client address is REMOTE_ADDR (portal/signin/address.py).
TRUSTED_PROXIES = env.list("TRUSTED_PROXIES", default=[])
AXES_FAILURE_LIMIT = env.int("SIGNIN_FAILURE_LIMIT", default=10)  # per account
# Per client address (an office behind one NAT address shares it): portal/signin/handler.py.
SIGNIN_ADDRESS_FAILURE_LIMIT = env.int("SIGNIN_ADDRESS_FAILURE_LIMIT", default=100)
AXES_HANDLER = "portal.signin.handler.PortalAxesHandler"
AXES_COOLOFF_TIME = timedelta(minutes=env.float("SIGNIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
# Attempts refused during a lockout do not prolong it, so its end is known (Retry-After).
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "portal.signin.address.client_ip"
AXES_LOCKOUT_CALLABLE = "portal.signin.lockout.lockout_response"
# portal/signin/admin.py registers the attempts with an audited "Unlock" action.
AXES_ENABLE_ADMIN = False

# Content-Security-Policy (issue #11 section 5): django-csp; docs/security.md "Headers".
# Every page loads scripts and styles from our static files only: no inline <script>,
# style="" or on*= handlers (bars use pct-N classes, static/css/portal.css), so neither
# needs 'unsafe-inline'. tests/portal/test_csp.py loads every page in headless Chromium
# and counts violations. CSP_REPORT_URI: where browsers send violation reports (optional).
from csp.constants import NONE as _CSP_NONE  # noqa: E402
from csp.constants import SELF as _CSP_SELF  # noqa: E402

INSTALLED_APPS += ["csp"]
# Before axes: a lockout page (axes swaps the response on the way out) keeps the header.
MIDDLEWARE.insert(
    MIDDLEWARE.index("axes.middleware.AxesMiddleware"), "csp.middleware.CSPMiddleware"
)
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [_CSP_SELF],
        "script-src": [_CSP_SELF],
        "style-src": [_CSP_SELF],
        "img-src": [_CSP_SELF, "data:"],
        "font-src": [_CSP_SELF],
        "connect-src": [_CSP_SELF],
        "object-src": [_CSP_NONE],
        "base-uri": [_CSP_NONE],
        "form-action": [_CSP_SELF],
        "frame-ancestors": [_CSP_NONE],
    }
}
if env.str("CSP_REPORT_URI", default=""):
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["report-uri"] = [env.str("CSP_REPORT_URI")]

# Members' API writes are rate limited (issue #11 section 5): portal/throttles.py.
# POST/PUT/PATCH/DELETE by a signed-in non-admin, per user; over it: 429 with Retry-After.
MEMBER_WRITE_RATE = env.str("MEMBER_WRITE_RATE", default="60/min")
REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] = [
    *REST_FRAMEWORK.get("DEFAULT_THROTTLE_CLASSES", []),
    "portal.throttles.MemberWriteThrottle",
]

# The demo runs with DEBUG off (issue #12 section 3, polish): devstack/demo.py sets
# WHITENOISE_USE_FINDERS=True so WhiteNoise serves static/ and the apps' files without a
# collectstatic; elsewhere WhiteNoise's own default (DEBUG) holds.
WHITENOISE_USE_FINDERS = env.bool("WHITENOISE_USE_FINDERS", default=DEBUG)

# In-app notifications and webhooks (issue #12 section 2): notices/, docs "Notifications".
# The header's unread count comes from a context processor (one COUNT, signed-in only).
# Webhook deliveries are outbox rows sent by Celery: NOTICES_WEBHOOK_TIMEOUT_SECONDS per
# POST, retried after BACKOFF x 2^(attempt-1) up to MAX_ATTEMPTS, re-sent by beat.
INSTALLED_APPS += ["notices"]
TEMPLATES[0]["OPTIONS"]["context_processors"].append("notices.context_processors.unread")
NOTICES_WEBHOOK_TIMEOUT_SECONDS = env.float("NOTICES_WEBHOOK_TIMEOUT_SECONDS", default=5.0)
NOTICES_WEBHOOK_MAX_ATTEMPTS = env.int("NOTICES_WEBHOOK_MAX_ATTEMPTS", default=6)
NOTICES_WEBHOOK_BACKOFF_SECONDS = env.float("NOTICES_WEBHOOK_BACKOFF_SECONDS", default=30.0)
CELERY_BEAT_SCHEDULE["notices-redispatch-webhooks"] = {
    "task": "notices.tasks.redispatch_webhooks",
    "schedule": timedelta(seconds=env.int("NOTICES_WEBHOOK_REDISPATCH_INTERVAL", default=30)),
}

# Comment threads on requests and live progress fragments (issue #12 section 2):
# discussion/, docs "Comments and live progress".
INSTALLED_APPS += ["discussion"]

# Single sign-on with OpenID Connect (issue #12 section 1): portal/sso/, docs "Single
# sign-on". Off unless OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET (or
# OIDC_CLIENT_SECRET_FILE) are set. Endpoints: OIDC_*_ENDPOINT / OIDC_JWKS_URI, else the
# issuer's discovery document, read on first use (not at start-up) and cached. Accounts are
# matched by issuer + sub, never silently by e-mail (OIDC_LINK_EXISTING: none | username |
# email); group rules are edited in the admin and re-applied at every sign-in.
INSTALLED_APPS += ["portal.sso"]
SSO_ISSUER = env.str("OIDC_ISSUER", default="").rstrip("/")
OIDC_RP_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = secret("OIDC_CLIENT_SECRET") or ""
SSO_ENABLED = bool(SSO_ISSUER and OIDC_RP_CLIENT_ID and OIDC_RP_CLIENT_SECRET)
SSO_PROVIDER_NAME = env.str("OIDC_PROVIDER_NAME", default="single sign-on")
SSO_USERNAME_CLAIM = env.str("OIDC_USERNAME_CLAIM", default="preferred_username")
SSO_GROUPS_CLAIM = env.str("OIDC_GROUPS_CLAIM", default="groups")
SSO_LINK_EXISTING = env.str("OIDC_LINK_EXISTING", default="none")
SSO_DISCOVERY_TTL = env.int("OIDC_DISCOVERY_TTL", default=3600)
SSO_ENDPOINTS = {
    "authorization_endpoint": env.str("OIDC_AUTHORIZATION_ENDPOINT", default=""),
    "token_endpoint": env.str("OIDC_TOKEN_ENDPOINT", default=""),
    "userinfo_endpoint": env.str("OIDC_USERINFO_ENDPOINT", default=""),
    "jwks_uri": env.str("OIDC_JWKS_URI", default=""),
}
OIDC_RP_SCOPES = env.str("OIDC_SCOPES", default="openid email profile")
OIDC_RP_SIGN_ALGO = env.str("OIDC_SIGN_ALGO", default="RS256")
OIDC_USE_PKCE = env.bool("OIDC_USE_PKCE", default=True)
OIDC_TOKEN_USE_BASIC_AUTH = (
    env.str("OIDC_TOKEN_AUTH_METHOD", default="client_secret_basic") == "client_secret_basic"
)
OIDC_TIMEOUT = env.float("OIDC_TIMEOUT", default=10.0)
OIDC_VERIFY_SSL = env.str("OIDC_CA_BUNDLE", default="") or True
OIDC_AUTHENTICATE_CLASS = "portal.sso.views.Authenticate"
OIDC_CALLBACK_CLASS = "portal.sso.views.Callback"
if SSO_ENABLED:
    AUTHENTICATION_BACKENDS = [*AUTHENTICATION_BACKENDS, "portal.sso.backend.SsoBackend"]

# Last, so that its process_exception runs first: PostgreSQL or Redis down -> 503.
MIDDLEWARE.append("portal.outages.DependencyOutageMiddleware")
