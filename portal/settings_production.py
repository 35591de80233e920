"""Production settings: refuse to start without a real secret key and host list."""

import re

from django.core.exceptions import ImproperlyConfigured

from .env import env, secret
from .settings import *  # noqa: F403

DEBUG = False

SECRET_KEY = secret("SECRET_KEY") or ""
if len(SECRET_KEY) < 50 or SECRET_KEY.startswith("insecure"):
    raise ImproperlyConfigured(
        "SECRET_KEY (or SECRET_KEY_FILE) must be set to a random value of at least 50 characters"
    )
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must list the host names the portal is served on")

# Requests that bypass the public host (portal/middleware.py explains each):
# kubelet probes (Host = the pod IP) and node agents posting to the in-cluster Service over
# plain HTTP. The internal hosts serve PORTAL_INTERNAL_PATHS only; set
# PORTAL_INTERNAL_HOSTS="" to turn the in-cluster path off.
PORTAL_PROBE_PATHS = ["/healthz", "/readyz", "/metrics"]
PORTAL_INTERNAL_HOSTS = [
    h
    for h in env.list(
        "PORTAL_INTERNAL_HOSTS",
        default=[
            "portal-web.gpu-quota-portal.svc",
            "portal-web.gpu-quota-portal.svc.cluster.local",
        ],
    )
    if h
]
PORTAL_INTERNAL_PATHS = ["/api/v1/agent/reports/"]
ALLOWED_HOSTS = [*ALLOWED_HOSTS, *PORTAL_INTERNAL_HOSTS]
MIDDLEWARE = ["portal.middleware.HostRoutingMiddleware", *MIDDLEWARE]  # noqa: F405

SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
# Paths only: HostRoutingMiddleware redirects the internal paths itself on public hosts.
SECURE_REDIRECT_EXEMPT = [
    f"^{re.escape(p.lstrip('/'))}$" for p in (*PORTAL_PROBE_PATHS, *PORTAL_INTERNAL_PATHS)
]
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
STORAGES["staticfiles"] = {  # noqa: F405
    "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
}
