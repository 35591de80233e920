"""Reads of one team namespace: every ResourceQuota and LimitRange in it, the portal's and
anyone else's (Kubernetes enforces all of them, GPU-FACTS.md section 1); its pending pods
and Warning events (why a job waits, quotas/waiting.py)."""

from __future__ import annotations

from typing import Any


class NamespaceCalls:
    """Mixed into :class:`inventory.kube.KubeGateway` (uses its ``_json`` and ``core``)."""

    def list_resource_quotas(self, namespace: str) -> list[dict[str, Any]]:
        body = self._json(self.core.list_namespaced_resource_quota, namespace)
        return body.get("items") or []

    def list_limit_ranges(self, namespace: str) -> list[dict[str, Any]]:
        body = self._json(self.core.list_namespaced_limit_range, namespace)
        return body.get("items") or []

    def list_pending_pods(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's pods in phase Pending (unscheduled, gated or still starting)."""
        body = self._json(
            self.core.list_namespaced_pod, namespace, field_selector="status.phase=Pending"
        )
        return body.get("items") or []

    def list_events(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's events (core/v1, what ``kubectl describe`` shows): a controller's
        pods refused by a quota (and created since), a kubelet that cannot start a pod."""
        body = self._json(self.core.list_namespaced_event, namespace)
        return body.get("items") or []
