"""Requests that do not come through the public host: kubelet probes and in-cluster agents.

``HostRoutingMiddleware`` is the first middleware in production (``settings_production``):

- **Probes.** The kubelet sends ``Host: <pod IP>:<port>`` (and Prometheus, scraping pods,
  does too). Django's ``HttpRequest.get_host()`` refuses any host not in ``ALLOWED_HOSTS``
  with ``DisallowedHost`` (400), and ``CommonMiddleware`` calls it on every request. So
  ``GET`` of a path in ``PORTAL_PROBE_PATHS`` (``/healthz``, ``/readyz``, ``/metrics``) is
  answered here, by the view the URLconf names, before any middleware validates the host.
  These views read no session and no host; ``/metrics`` still needs its bearer token.
- **In-cluster agents.** Node agents post to ``http://portal-web.gpu-quota-portal.svc``
  (plain HTTP inside the cluster; TLS ends at the ingress). Hosts in
  ``PORTAL_INTERNAL_HOSTS`` are allowed (settings add them to ``ALLOWED_HOSTS``) for the
  paths in ``PORTAL_INTERNAL_PATHS`` only, everything else there is a 404; a forwarded
  protocol header is dropped on them because they never pass through the TLS proxy.
  Django's ``SecurityMiddleware`` exempts those paths from the HTTPS redirect
  (``SECURE_REDIRECT_EXEMPT``, which matches paths, not hosts), so this middleware does the
  redirect itself for them on every other host: the public host still answers plain HTTP
  with a 301 to https, and HSTS and secure cookies are unchanged.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.http.request import split_domain_port
from django.urls import resolve

from .parsers import too_large_detail
from .validation import DIGITS_MESSAGE, digits_problem


class HostRoutingMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.probe_paths = frozenset(settings.PORTAL_PROBE_PATHS)
        self.internal_hosts = frozenset(h.lower() for h in settings.PORTAL_INTERNAL_HOSTS)
        self.internal_paths = frozenset(settings.PORTAL_INTERNAL_PATHS)
        proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
        self.proxy_header = proxy_header[0] if proxy_header else None

    def __call__(self, request):
        if request.method == "GET" and request.path_info in self.probe_paths:
            return self._probe(request)
        domain, _ = split_domain_port(request.META.get("HTTP_HOST", ""))
        if domain in self.internal_hosts:
            if self.proxy_header:
                request.META.pop(self.proxy_header, None)
            if request.path_info not in self.internal_paths:
                return JsonResponse(
                    {"detail": "Only the agent API is served on the in-cluster host."},
                    status=404,
                )
        elif (
            request.path_info in self.internal_paths
            and settings.SECURE_SSL_REDIRECT
            and not request.is_secure()
        ):
            # What SecurityMiddleware would do, had the path not been exempted for the
            # in-cluster host. get_host() validates the host (400 when not allowed).
            host = settings.SECURE_SSL_HOST or request.get_host()
            return HttpResponsePermanentRedirect(f"https://{host}{request.get_full_path()}")
        return self.get_response(request)

    def _probe(self, request):
        match = resolve(request.path_info)
        # No session middleware ran: a probe is anonymous (metrics then need the token).
        request.user = AnonymousUser()
        return match.func(request, *match.args, **match.kwargs)


class InputGuardMiddleware:
    """Refuse, with a 4xx and a message, what would otherwise reach a view and end in a 500.

    - NUL in the path or the query string (PostgreSQL refuses NUL in text, so a lookup by
      slug or a text filter holding ``%00`` would fail there): 400.
    - On ``/api/``, a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is a JSON 413, announced by
      ``Content-Length`` (refused before it is read) or found while reading a form body
      (Django's ``RequestDataTooBig``, otherwise an HTML 400 page); too many form fields is
      a JSON 400. DRF views get the same answers from ``portal.rest.exception_handler``.
    Elsewhere the answers are plain text.
    """

    API_PREFIX = "/api/"

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            problem = url_problem(request) or form_problem(request)
        except RequestDataTooBig:
            return self._refuse(
                request, 413, too_large_detail(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
            )
        except (TooManyFieldsSent, TooManyFilesSent) as err:
            return self._refuse(request, 400, str(err) or "Too many form fields.")
        if problem:
            return self._refuse(request, 400, problem)
        if request.path_info.startswith(self.API_PREFIX):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return self._refuse(request, 400, "Invalid Content-Length.")
            if limit is not None and length > limit:
                return self._refuse(request, 413, too_large_detail(limit))
            return json_errors(self.get_response(request))
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, RequestDataTooBig):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0
            return self._refuse(request, 413, too_large_detail(limit))
        if isinstance(exception, TooManyFieldsSent | TooManyFilesSent):
            return self._refuse(request, 400, str(exception) or "Too many form fields.")
        return None

    def _refuse(self, request, status: int, detail: str):
        if request.path_info.startswith(self.API_PREFIX):
            return JsonResponse({"detail": detail}, status=status)
        return HttpResponse(detail, status=status, content_type="text/plain; charset=utf-8")


def json_errors(response):
    """An HTML error page on ``/api/`` (a URL no route matches, Django's 400/403/500
    handlers) becomes the API's error body: ``{"detail": ...}`` with the same status."""
    if response.status_code < 400 or "html" not in response.get("Content-Type", ""):
        return response
    reason = response.reason_phrase or "Error"
    replaced = JsonResponse({"detail": f"{reason}."}, status=response.status_code)
    for header in ("Retry-After", "WWW-Authenticate", "Allow"):
        if header in response:
            replaced[header] = response[header]
    return replaced


def form_problem(request) -> str | None:
    """A query or form value that int() would read as a number but that is not written
    with ASCII digits (``?page=٣``, ``amount=1_000``): Django's and DRF's number fields
    would take it (#24 finding 8). JSON bodies are checked where they are parsed."""
    values = [("query", k, v) for k, vs in request.GET.lists() for v in vs]
    content_type = request.META.get("CONTENT_TYPE", "")
    # Not a multipart body on the API: reading it here would leave DRF an exhausted
    # stream (it would then see an empty body instead of refusing the media type).
    forms = ("application/x-www-form-urlencoded",)
    if not request.path_info.startswith(InputGuardMiddleware.API_PREFIX):
        forms += ("multipart/form-data",)
    if request.method == "POST" and content_type.startswith(forms):
        values += [("form", k, v) for k, vs in request.POST.lists() for v in vs]
    for where, key, value in values:
        if isinstance(value, str) and digits_problem(value):
            return f"{where} parameter {key}: {DIGITS_MESSAGE}"
    return None


def url_problem(request) -> str | None:
    if "\x00" in request.path_info:
        return "NUL characters are not allowed in the URL."
    if "%00" in request.META.get("QUERY_STRING", "") or "\x00" in request.META.get(
        "QUERY_STRING", ""
    ):
        return "NUL characters are not allowed in the query string."
    return None
