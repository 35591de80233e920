"""Celery tasks of the MIG coordinator: advance one run by one step, and beat's re-dispatch."""

from __future__ import annotations

from celery import shared_task

from . import coordinator


@shared_task(ignore_result=True, acks_late=True)
def advance_run(request_id: str) -> str:
    """Execute the next step of a MIG run; schedules its own follow-up."""
    return coordinator.advance(request_id)


@shared_task(ignore_result=True)
def redispatch_mig_runs() -> int:
    """Beat: re-send active runs whose next step is overdue (lost message or worker)."""
    return coordinator.redispatch_due()
