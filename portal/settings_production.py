"""Production settings: refuse to start without a real secret key and host list."""

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

SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
STORAGES["staticfiles"] = {  # noqa: F405
    "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
}
