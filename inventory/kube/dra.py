"""Dynamic Resource Allocation (``resource.k8s.io/v1``, GA since Kubernetes v1.34): the
drivers' ResourceSlices (the devices), the ResourceClaims that ask for and hold them, and the
DeviceClasses the portal manages per GPU class (quotas/dra.py). Used only on clusters whose
enforcement is ``dra`` (docs/quotas.md).

Lists are paged like the inventory's (a 410 on a continue token propagates: the caller
relists); DeviceClasses are written by server-side apply under the portal's field manager.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from .base import APPLY_PATCH, FIELD_MANAGER, KubeError


class DraCalls:
    """Mixed into :class:`inventory.kube.KubeGateway` (uses its ``_json``)."""

    def _resource(self) -> client.ResourceV1Api:
        return client.ResourceV1Api(self.api_client)

    def _list_all(self, fn, **kwargs: Any) -> list[dict[str, Any]]:
        return [item for page in self._paged(fn, **kwargs) for item in page.items]

    def list_resource_slices(self) -> list[dict[str, Any]] | None:
        """Every ResourceSlice; None when the cluster does not serve ``resource.k8s.io/v1``."""
        try:
            return self._list_all(self._resource().list_resource_slice)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def list_resource_claims(self, namespace: str = "") -> list[dict[str, Any]]:
        """The ResourceClaims of one namespace, or of every namespace (requests,
        allocation, reservedFor)."""
        if namespace:
            return self._list_all(
                self._resource().list_namespaced_resource_claim, namespace=namespace
            )
        return self._list_all(self._resource().list_resource_claim_for_all_namespaces)

    def read_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One ResourceClaim (None: there is none of that name), for the pod watch on a DRA
        cluster (inventory/watch.py): what a pod holds is in its claims."""
        try:
            return self._json(self._resource().read_namespaced_resource_claim, name, namespace)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def list_device_classes(self, *, label_selector: str = "") -> list[dict[str, Any]]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return self._list_all(self._resource().list_device_class, **kwargs)

    def apply_device_class(self, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply one DeviceClass (cluster-scoped)."""
        return self._json(
            self._resource().patch_device_class,
            body["metadata"]["name"], body,
            field_manager=FIELD_MANAGER, force=True, _content_type=APPLY_PATCH,
        )  # fmt: skip
