"""Celery tasks: apply label operations; beat's re-dispatch and drift check."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(ignore_result=True, acks_late=True)
def apply_label_operation(op_id: str) -> str:
    return services.run_operation(op_id)


@shared_task(ignore_result=True)
def redispatch_label_operations() -> int:
    return services.redispatch_due()


@shared_task(ignore_result=True)
def reconcile_node_labels() -> dict[str, int]:
    return services.reconcile()
