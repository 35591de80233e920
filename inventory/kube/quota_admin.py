"""Removing a namespace's ResourceQuota: only when an admin adopted a foreign quota and
asked, on a confirmation page, for it to go (quotas/adoption.py)."""

from __future__ import annotations

from .base import KubeError


class QuotaAdminCalls:
    """Mixed into :class:`inventory.kube.KubeGateway` (uses its ``_json`` and ``core``)."""

    def delete_resource_quota(self, namespace: str, name: str) -> bool:
        """Delete one ResourceQuota; False when it was already gone (404)."""
        try:
            self._json(self.core.delete_namespaced_resource_quota, name, namespace)
        except KubeError as err:
            if err.status == 404:
                return False
            raise
        return True
