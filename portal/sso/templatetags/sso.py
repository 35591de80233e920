"""``{% sso_signin %}``: the "Sign in with <provider>" button of the sign-in page."""

from urllib.parse import urlencode

from django import template
from django.conf import settings
from django.urls import reverse

from .. import config

register = template.Library()


@register.inclusion_tag("sso/button.html", takes_context=True)
def sso_signin(context):
    if not config.enabled():
        return {"enabled": False}
    url = reverse("oidc_authentication_init")
    following = context.get("next")
    if following:
        url += "?" + urlencode({"next": following})
    return {"enabled": True, "url": url, "provider_name": settings.SSO_PROVIDER_NAME}
