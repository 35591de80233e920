"""Fail fast on a TRUSTED_PROXIES entry that is not an address or network."""

from django.conf import settings
from django.core import checks

from .address import trusted_networks


@checks.register(checks.Tags.security)
def trusted_proxies_check(app_configs, **kwargs):
    try:
        trusted_networks(tuple(getattr(settings, "TRUSTED_PROXIES", ()) or ()))
    except ValueError as err:
        return [checks.Error(str(err), id="signin.E001")]
    return []
