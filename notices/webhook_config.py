"""Admins' changes to webhooks: validated, transactional and audited.

The secret is write-only: ``None`` keeps the stored one, "" clears it; the audit trail
records only whether a secret is set, never its value.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from quotas import audit

from . import webhooks
from .models import Event, Webhook, WebhookDelivery, validate_webhook_url

FIELDS = ("name", "url", "format", "events", "team", "active")


def _staff(by) -> None:
    if by is None or not by.is_staff:
        raise PermissionError("Only portal admins manage webhooks.")


def _state(hook: Webhook) -> dict[str, Any]:
    return {
        "name": hook.name, "url": hook.url, "format": hook.format, "events": hook.events,
        "team": hook.team.slug if hook.team_id else None, "active": hook.active,
        "secret_set": bool(hook.secret),
    }  # fmt: skip


def validate(hook: Webhook) -> None:
    errors: dict[str, list[str]] = {}
    name = (hook.name or "").strip()
    if not name:
        errors["name"] = ["Give the webhook a name."]
    hook.name = name
    try:
        validate_webhook_url(hook.url or "")
    except ValidationError:
        errors["url"] = ["Enter a full http:// or https:// URL."]
    if hook.format not in Webhook.Format.values:
        errors["format"] = ["Choose slack or generic."]
    unknown = [e for e in hook.events or [] if e not in Event.values]
    if not isinstance(hook.events, list) or unknown:
        errors["events"] = [f"Unknown events: {', '.join(map(str, unknown))}."]
    else:
        hook.events = sorted(set(hook.events))
    if hook.format == Webhook.Format.GENERIC and not hook.secret:
        errors["secret"] = ["Generic webhooks are signed: set a secret."]
    if len(hook.secret or "") > 200:
        errors["secret"] = ["Use at most 200 characters."]
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def create(by, *, secret: str = "", **fields: Any) -> Webhook:
    _staff(by)
    hook = Webhook(**{k: fields[k] for k in FIELDS if k in fields}, secret=secret or "")
    validate(hook)
    hook.save()
    audit.record(by, "webhook.created", hook, team=hook.team, after=_state(hook))
    return hook


@transaction.atomic
def update(by, hook: Webhook, *, secret: str | None = None, **fields: Any) -> Webhook:
    _staff(by)
    hook = Webhook.objects.select_for_update(of=("self",)).select_related("team").get(pk=hook.pk)
    before = _state(hook)
    for key in FIELDS:
        if key in fields:
            setattr(hook, key, fields[key])
    if secret is not None:
        hook.secret = secret
    validate(hook)
    hook.save()
    after = _state(hook)
    note = {None: "", "": "secret removed"}.get(secret, "secret replaced")
    audit.record(by, "webhook.updated", hook, team=hook.team, before=before, after=after,
                 note=note)  # fmt: skip
    return hook


@transaction.atomic
def delete(by, hook: Webhook) -> None:
    _staff(by)
    hook = Webhook.objects.select_for_update(of=("self",)).select_related("team").get(pk=hook.pk)
    audit.record(by, "webhook.deleted", hook, team=hook.team, before=_state(hook))
    hook.delete()


@transaction.atomic
def send_test(by, hook: Webhook) -> WebhookDelivery:
    _staff(by)
    row = webhooks.queue_test(hook, by)
    audit.record(by, "webhook.tested", hook, team=hook.team, after={"delivery": str(row.pk)})
    return row


@transaction.atomic
def retry(by, row: WebhookDelivery) -> bool:
    _staff(by)
    done = webhooks.retry(row)
    if done:
        audit.record(by, "webhook.retried", row.webhook, team=row.webhook.team,
                     after={"delivery": str(row.pk)})  # fmt: skip
    return done
