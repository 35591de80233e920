"""Who may see which pod names: the one rule for every page and endpoint.

Inventory is not team-scoped (everyone sees which GPUs exist and how busy they are), but
pod names say what another team is running. So:

- admins (Django staff) see every pod name;
- a member sees the names of pods in their own teams' namespaces (a ``TeamNamespace`` of
  a team they belong to, on that cluster) and, for every other pod, only its namespace.

Pages and the REST API build one ``PodNames`` per request (one query, on first use) and
ask it per pod: the node page and its telemetry section, the node detail and GPU list
endpoints, the idle-allocation badges. Lists that are already limited to the caller's own
teams (a team's dashboard, My teams) or to admins (idle allocations, fleet health, MIG
proposals) pass through the same rule and so show every name.
"""

from __future__ import annotations

from functools import cached_property


class PodNames:
    """The pod names ``user`` may see; ``visible(cluster_id, namespace)`` per pod."""

    def __init__(self, user) -> None:
        self.user = user
        self.sees_all = bool(getattr(user, "is_staff", False))

    @cached_property
    def _own(self) -> frozenset[tuple]:
        from quotas.models import TeamNamespace  # quotas depends on inventory, not back

        if not getattr(self.user, "is_authenticated", False):
            return frozenset()
        rows = TeamNamespace.objects.filter(team__memberships__user=self.user).values_list(
            "cluster_id", "name"
        )
        return frozenset(rows)

    def visible(self, cluster_id, namespace: str | None) -> bool:
        """Whether the names of pods in ``namespace`` on the cluster may be shown."""
        if self.sees_all:
            return True
        return bool(namespace) and (cluster_id, namespace) in self._own

    def name(self, cluster_id, namespace: str | None, name: str | None) -> str | None:
        """``name`` when visible, else None."""
        return name if name and self.visible(cluster_id, namespace) else None

    def qualified(self, cluster_id, qualified: str | None) -> str | None:
        """An agent's ``"namespace/name"`` when visible, else None."""
        if not qualified:
            return None
        namespace = qualified.partition("/")[0]
        return qualified if self.visible(cluster_id, namespace) else None


def pod_names_for(user) -> PodNames:
    return PodNames(user)
