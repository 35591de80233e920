"""The append-only audit trail (who, what, before, after, when)."""

from __future__ import annotations

from typing import Any

from django.db import models

from .models import AuditEvent, Team

SYSTEM = "system"


def record(
    actor,
    action: str,
    obj: models.Model,
    *,
    team: Team | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    note: str = "",
) -> AuditEvent:
    """Write one audit row; ``actor`` None means a worker (shown as "system")."""
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.get_username() if actor is not None and actor.pk else SYSTEM,
        action=action,
        object_type=obj._meta.model_name,
        object_id=str(obj.pk),
        team=team,
        before=before,
        after=after,
        note=note[:2000],
    )
