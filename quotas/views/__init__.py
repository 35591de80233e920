"""Quota pages, one module per area (see quotas/urls.py)."""

from .account import notifications
from .audit import audit, audit_export
from .capacity_page import capacity
from .queue import queue
from .requests import (
    grant_release,
    grant_renew,
    request_approve,
    request_cancel,
    request_detail,
    request_list,
    request_new,
    request_reject,
)
from .teams import teams

__all__ = [
    "audit",
    "audit_export",
    "capacity",
    "grant_release",
    "grant_renew",
    "notifications",
    "queue",
    "request_approve",
    "request_cancel",
    "request_detail",
    "request_list",
    "request_new",
    "request_reject",
    "teams",
]
