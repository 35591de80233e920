"""Celery tasks: send a webhook delivery; beat's re-dispatch of due and stalled ones."""

from __future__ import annotations

from celery import shared_task

from . import webhooks


@shared_task(ignore_result=True, acks_late=True)
def deliver_webhook(delivery_id: str) -> str:
    return webhooks.deliver(delivery_id)


@shared_task(ignore_result=True)
def redispatch_webhooks() -> int:
    return webhooks.redispatch_due()
