"""Kueue's API (``kueue.x-k8s.io/v1beta2``, the storage version of current Kueue): the
ResourceFlavors, ClusterQueues and LocalQueues the portal manages, read back with their
status, and the Workloads of team namespaces (what runs and what waits).

Everything is written by server-side apply under the portal's field manager, as the
ResourceQuota is (kubernetes-sigs/kueue ``apis/kueue/v1beta2/*_types.go`` for the shapes).

Queue positions come from Kueue's on-demand visibility API (``visibility.kueue.x-k8s.io``,
an aggregated API served by Kueue's manager where its ``VisibilityOnDemand`` gate is on:
kueue ``pkg/visibility/storage/pending_workloads_lq.go``, ``apis/visibility/v1beta2``).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from .base import APPLY_PATCH, FIELD_MANAGER, KubeError

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta2"


class KueueCalls:
    """Mixed into :class:`inventory.kube.KubeGateway` (uses its ``_json``)."""

    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def _apply_cluster_object(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json(
            self._custom().patch_cluster_custom_object,
            KUEUE_GROUP, KUEUE_VERSION, plural, body["metadata"]["name"], body,
            field_manager=FIELD_MANAGER, force=True, _content_type=APPLY_PATCH,
        )  # fmt: skip

    def apply_resource_flavor(self, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply one ResourceFlavor (cluster-scoped)."""
        return self._apply_cluster_object("resourceflavors", body)

    def apply_cluster_queue(self, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply one ClusterQueue (cluster-scoped)."""
        return self._apply_cluster_object("clusterqueues", body)

    def apply_local_queue(self, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply one LocalQueue in its namespace."""
        meta = body["metadata"]
        return self._json(
            self._custom().patch_namespaced_custom_object,
            KUEUE_GROUP, KUEUE_VERSION, meta["namespace"], "localqueues", meta["name"], body,
            field_manager=FIELD_MANAGER, force=True, _content_type=APPLY_PATCH,
        )  # fmt: skip

    def get_cluster_queue(self, name: str) -> dict[str, Any] | None:
        try:
            return self._json(
                self._custom().get_cluster_custom_object,
                KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name,
            )  # fmt: skip
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def list_kueue_objects(
        self, plural: str, *, namespace: str = "", label_selector: str = ""
    ) -> list[dict[str, Any]] | None:
        """``resourceflavors`` / ``clusterqueues`` (cluster-wide) or ``localqueues`` /
        ``workloads`` of one namespace; None when the cluster does not serve Kueue's API
        (Kueue not installed)."""
        kwargs = {"label_selector": label_selector} if label_selector else {}
        try:
            if namespace:
                body = self._json(
                    self._custom().list_namespaced_custom_object,
                    KUEUE_GROUP, KUEUE_VERSION, namespace, plural, **kwargs,
                )  # fmt: skip
            else:
                body = self._json(
                    self._custom().list_cluster_custom_object,
                    KUEUE_GROUP, KUEUE_VERSION, plural, **kwargs,
                )  # fmt: skip
        except KubeError as err:
            if err.status == 404:
                return None
            raise
        return body.get("items") or []

    def list_pending_workloads(
        self, namespace: str, local_queue: str
    ) -> list[dict[str, Any]] | None:
        """The pending workloads of a LocalQueue in Kueue's order, each with
        ``positionInLocalQueue`` and ``positionInClusterQueue`` (from 0); ``[]`` when Kueue
        does not know the queue, None when the cluster does not serve the visibility API
        (404 for the group, 503 when its APIService is unavailable). Other errors raise."""
        path = (
            f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}/namespaces/{{namespace}}"
            "/localqueues/{name}/pendingworkloads"
        )
        try:
            body = self._json(
                self.api_client.call_api, path, "GET",
                path_params={"namespace": namespace, "name": local_queue},
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"], _return_http_data_only=True,
            )  # fmt: skip
        except KubeError as err:
            if err.status == 404 and err.kind == "localqueue":
                return []
            if err.status in (404, 503):
                return None
            raise
        return body.get("items") or []
