"""Reads of a namespace's own limits: every ResourceQuota and LimitRange in it, the
portal's and anyone else's (Kubernetes enforces all of them, GPU-FACTS.md section 1)."""

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
