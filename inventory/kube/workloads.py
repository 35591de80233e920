"""Calls of the MIG coordinator: pods on a node, evictions, the mig-parted ConfigMap."""

from __future__ import annotations

from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .base import FIELD_MANAGER, KubeError


class WorkloadCalls:
    """Mixed into :class:`inventory.kube.KubeGateway` (uses its ``_json`` and ``core``)."""

    def list_pods(self, *, field_selector: str | None = None) -> list[dict[str, Any]]:
        """All pods (all namespaces) matching a field selector, e.g. ``spec.nodeName=n1``."""
        items: list[dict[str, Any]] = []
        for page in self.list_pages("pods", field_selector=field_selector):
            items.extend(page.items)
        return items

    def try_evict_pod(self, namespace: str, name: str) -> str:
        """Ask the Eviction API once: ``"evicted"``, ``"gone"`` or ``"blocked"``.

        A 429 means a PodDisruptionBudget forbids the eviction now; it is not retried
        here, because the caller (the MIG coordinator) decides how long to keep trying.
        Other errors raise ``KubeError``.
        """
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            self.core.create_namespaced_pod_eviction(
                name, namespace, body, _request_timeout=self.timeout
            )
        except ApiException as err:
            error = KubeError.from_api_exception(err)
            if error.status == 429:
                return "blocked"
            if error.status == 404:
                return "gone"
            raise error from err
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise KubeError(f"Cannot reach the API server: {err}", permanent=False) from err
        return "evicted"

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ConfigMap as raw JSON, or None when it does not exist."""
        try:
            return self._json(self.core.read_namespaced_config_map, name, namespace)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def create_config_map(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a ConfigMap; 409 AlreadyExists surfaces as ``KubeError(status=409)``."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if annotations:
            metadata["annotations"] = annotations
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        return self._json(self.core.create_namespaced_config_map, namespace, body)

    def replace_config_map(self, namespace: str, config_map: dict[str, Any]) -> dict[str, Any]:
        """PUT a ConfigMap read earlier; its ``metadata.resourceVersion`` makes the write
        conditional, so a concurrent change answers 409 (re-read, merge again, retry)."""
        name = config_map["metadata"]["name"]
        return self._json(
            self.core.replace_namespaced_config_map,
            name,
            namespace,
            config_map,
            field_manager=FIELD_MANAGER,
        )
