"""Admins' webhook pages: list with recent deliveries, form, delete confirmation, send
test, retry. Views parse and render; ``notices.webhook_config`` decides and audits."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from . import webhook_config, webhooks
from .forms import WebhookForm
from .models import Webhook, WebhookDelivery

RECENT = 25


def _staff_only(user) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only portal admins manage webhooks.")


@login_required
def webhook_list(request: HttpRequest) -> HttpResponse:
    _staff_only(request.user)
    hooks = list(Webhook.objects.select_related("team"))
    deliveries = list(WebhookDelivery.objects.select_related("webhook")[:RECENT])
    return render(request, "notices/webhook_list.html",
                  {"hooks": hooks, "deliveries": deliveries})  # fmt: skip


def _save(request: HttpRequest, form: WebhookForm, hook: Webhook | None) -> Webhook | None:
    try:
        if hook is None:
            return webhook_config.create(request.user, **form.domain_fields())
        return webhook_config.update(request.user, hook, **form.domain_fields())
    except ValidationError as err:
        form.add_service_errors(err.message_dict)
    return None


@login_required
def webhook_new(request: HttpRequest) -> HttpResponse:
    _staff_only(request.user)
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        hook = _save(request, form, None)
        if hook is not None:
            messages.success(request, f"Webhook {hook.name} saved.")
            return redirect("notices:webhooks")
    return render(request, "notices/webhook_form.html", {"form": form, "hook": None})


@login_required
def webhook_edit(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    hook = get_object_or_404(Webhook.objects.select_related("team"), pk=pk)
    form = WebhookForm(request.POST or None, instance=hook)
    if request.method == "POST" and form.is_valid() and _save(request, form, hook):
        messages.success(request, f"Webhook {hook.name} saved.")
        return redirect("notices:webhooks")
    return render(request, "notices/webhook_form.html", {"form": form, "hook": hook})


@login_required
def webhook_delete(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    hook = get_object_or_404(Webhook.objects.select_related("team"), pk=pk)
    if request.method == "POST":
        webhook_config.delete(request.user, hook)
        messages.success(request, f"Webhook {hook.name} deleted, with its delivery history.")
        return redirect("notices:webhooks")
    pending = hook.deliveries.filter(status__in=WebhookDelivery.OPEN).count()
    return render(request, "notices/webhook_delete.html", {"hook": hook, "pending": pending})


@login_required
@require_POST
def webhook_test(request: HttpRequest, pk) -> HttpResponse:
    """Queue a test delivery and try it at once, so the admin sees the answer."""
    _staff_only(request.user)
    hook = get_object_or_404(Webhook, pk=pk)
    row = webhook_config.send_test(request.user, hook)
    outcome = webhooks.deliver(row.pk)
    row.refresh_from_db()
    if outcome == WebhookDelivery.Status.DONE:
        messages.success(request, f"Test delivered to {hook.name}: HTTP {row.response_code}.")
    elif outcome == "skipped":
        messages.info(request, f"Test queued for {hook.name}; see the deliveries below.")
    else:
        retry = " It is retried with backoff." if outcome == WebhookDelivery.Status.PENDING else ""
        messages.error(request, f"Test to {hook.name} failed: {row.last_error}.{retry}")
    return redirect("notices:webhooks")


@login_required
@require_POST
def delivery_retry(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    row = get_object_or_404(WebhookDelivery.objects.select_related("webhook__team"), pk=pk)
    if webhook_config.retry(request.user, row):
        messages.success(request, f"Delivery to {row.webhook.name} queued again.")
    else:
        messages.error(request, "Only a failed delivery can be retried.")
    return redirect("notices:webhooks")
