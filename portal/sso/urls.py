"""mozilla-django-oidc's routes (authenticate/, callback/, logout/), mounted at /sso/.

The library's own urlpatterns (its views are ours through OIDC_AUTHENTICATE_CLASS and
OIDC_CALLBACK_CLASS in settings), each answering 404 while single sign-on is off.
"""

from functools import wraps

from django.http import Http404
from django.urls import path
from mozilla_django_oidc import urls as oidc_urls

from . import config


def _only_when_enabled(view):
    @wraps(view)
    def gated(request, *args, **kwargs):
        if not config.enabled():
            raise Http404("Single sign-on is not configured.")
        return view(request, *args, **kwargs)

    return gated


urlpatterns = [
    path(str(p.pattern), _only_when_enabled(p.callback), name=p.name) for p in oidc_urls.urlpatterns
]
