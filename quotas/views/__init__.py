"""Quota pages, one module per area (see quotas/urls.py)."""

from .account import notifications
from .audit import audit, audit_export
from .calendar_page import calendar, calendar_feed, calendar_feed_revoke, calendar_ics
from .capacity_page import capacity
from .members import team_member_remove, team_members
from .namespaces import (
    foreign_adopt,
    foreign_keep,
    foreign_remove,
    lowering_confirm,
    namespace_detail,
    namespace_new,
)
from .queue import queue
from .reclaims import reclaim_answer
from .requests import (
    grant_release,
    grant_renew,
    request_approve,
    request_cancel,
    request_detail,
    request_export,
    request_list,
    request_new,
    request_reject,
)
from .teams import teams
from .waiting import waiting

__all__ = [
    "audit",
    "audit_export",
    "calendar",
    "calendar_feed",
    "calendar_feed_revoke",
    "calendar_ics",
    "capacity",
    "foreign_adopt",
    "foreign_keep",
    "foreign_remove",
    "grant_release",
    "grant_renew",
    "lowering_confirm",
    "namespace_detail",
    "namespace_new",
    "notifications",
    "queue",
    "reclaim_answer",
    "request_approve",
    "request_cancel",
    "request_detail",
    "request_export",
    "request_list",
    "request_new",
    "request_reject",
    "team_member_remove",
    "team_members",
    "teams",
    "waiting",
]
