"""Team isolation: the one rule that limits every quota query to the caller's teams.

Pages, the REST API and other apps (MIG requests) call ``visible_to``; admins (Django
staff) see everything.
"""

from __future__ import annotations

from .models import Team


def visible_to(queryset, user, team_path: str = "team"):
    """``queryset`` restricted to rows of teams ``user`` belongs to (admins: everything).

    ``team_path`` leads from the model to its Team ("team", "namespace__team", or "pk"
    for teams themselves). One subquery, so rows are never duplicated.
    """
    if user.is_staff:
        return queryset
    mine = Team.objects.filter(memberships__user=user).values("pk")
    return queryset.filter(**{f"{team_path}__in": mine})
