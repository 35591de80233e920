"""Fail fast on a single sign-on setting that cannot work."""

from django.conf import settings
from django.core import checks

from .accounts import LINK_CHOICES

BACKEND = "portal.sso.backend.SsoBackend"
AXES = "axes.backends.AxesStandaloneBackend"


@checks.register(checks.Tags.security)
def sso_settings_check(app_configs, **kwargs):
    errors = []
    if getattr(settings, "SSO_LINK_EXISTING", "none") not in LINK_CHOICES:
        errors.append(checks.Error(
            f"OIDC_LINK_EXISTING is {settings.SSO_LINK_EXISTING!r}; choose one of "
            f"{', '.join(LINK_CHOICES)}.", id="sso.E001",
        ))  # fmt: skip
    if getattr(settings, "SSO_ENABLED", False):
        backends = list(settings.AUTHENTICATION_BACKENDS)
        if BACKEND not in backends:
            errors.append(checks.Error(f"Single sign-on is on but {BACKEND} is not in "
                                       "AUTHENTICATION_BACKENDS.", id="sso.E002"))  # fmt: skip
        elif AXES in backends and backends[0] != AXES:
            errors.append(checks.Error("AxesStandaloneBackend must stay the first "
                                       "authentication backend.", id="sso.E003"))  # fmt: skip
    return errors


@checks.register(checks.Tags.security, deploy=True)
def sso_https_check(app_configs, **kwargs):
    if getattr(settings, "SSO_ENABLED", False) and not settings.SSO_ISSUER.startswith("https://"):
        message = (f"OIDC_ISSUER {settings.SSO_ISSUER!r} is not https: tokens and codes "
                   "would cross the network in clear.")  # fmt: skip
        return [checks.Warning(message, id="sso.W001")]
    return []
