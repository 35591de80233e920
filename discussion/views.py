"""Request pages' comment forms (POST) and live progress fragments (GET, polled by htmx).

Both apply the page's own isolation (``visible_requests`` of quotas and of mig): another
team's request is a 404 here as on its page.
"""

from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from mig import views as mig_views
from quotas.views import requests as quota_views
from quotas.views.common import visible_requests

from . import progress, services
from .forms import CommentForm

# -- comments --------------------------------------------------------------------------


def _post(request: HttpRequest, target, rerender) -> HttpResponse:
    form = CommentForm(request.POST)
    if form.is_valid():
        try:
            services.post(request.user, target, form.cleaned_data["body"])
        except ValidationError as err:
            form.add_service_errors(err.message_dict)
        except PermissionError as err:
            raise PermissionDenied(str(err)) from err
        else:
            messages.success(request, "Comment posted: the other party has been told.")
            return redirect(services.page_url(target))
    messages.error(request, "Not posted: see the comment form below.")
    return rerender(form)


@require_POST
@login_required
def quota_comment(request: HttpRequest, pk) -> HttpResponse:
    req = get_object_or_404(visible_requests(request.user), pk=pk)

    def rerender(form):
        ctx = quota_views._detail_context(request, req, comment_form=form)
        return render(request, "quotas/request_detail.html", ctx, status=400)

    return _post(request, req, rerender)


@require_POST
@login_required
def mig_comment(request: HttpRequest, pk) -> HttpResponse:
    req = get_object_or_404(mig_views.visible_requests(request.user), pk=pk)

    def rerender(form):
        ctx = mig_views._detail_context(request, req, comment_form=form)
        return render(request, "mig/request_detail.html", ctx, status=400)

    return _post(request, req, rerender)


# -- live progress fragments -----------------------------------------------------------


def _fragment_login(view):
    """Signed out while polling: htmx reloads the page (which asks to sign in) instead of
    swapping the sign-in form into the fragment; a plain GET gets the usual redirect."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        if request.headers.get("HX-Request"):
            response = HttpResponse("Signed out.", status=401, content_type="text/plain")
            response["HX-Refresh"] = "true"
            return response
        return redirect_to_login(request.get_full_path())

    return wrapper


@require_GET
@never_cache
@_fragment_login
def quota_progress(request: HttpRequest, pk) -> HttpResponse:
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    operations = list(req.operations.all())
    ctx = {
        "req": req,
        "timeline": quota_views._timeline(req),
        "operations": operations,
        **progress.quota_context(req, operations),
    }
    return render(request, "quotas/_progress_response.html", ctx)


@require_GET
@never_cache
@_fragment_login
def mig_progress(request: HttpRequest, pk) -> HttpResponse:
    req = get_object_or_404(mig_views.visible_requests(request.user), pk=pk)
    ctx = {"req": req, "steps": list(req.steps.all()), "polled": True, **progress.mig_context(req)}
    return render(request, "mig/_progress_response.html", ctx)
