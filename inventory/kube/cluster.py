"""Cluster-level reads: what the portal may do (access reviews) and the GPU Operator's
ClusterPolicy. Used by the connection preflight and the MIG coordinator."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from .base import KubeError

# The GPU Operator's custom resource (NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go).
CLUSTER_POLICY = ("nvidia.com", "v1", "clusterpolicies")


class ClusterCalls:
    """Mixed into :class:`inventory.kube.KubeGateway` (uses its ``_json``)."""

    def access_review(
        self,
        verb: str,
        resource: str,
        *,
        group: str = "",
        namespace: str = "",
        name: str = "",
        subresource: str = "",
    ) -> tuple[bool, str]:
        """Ask the API server whether our credentials may do one thing
        (SelfSubjectAccessReview, allowed for every authenticated user by the bootstrap
        role ``system:basic-user``). Returns (allowed, the authorizer's reason)."""
        attributes = {"verb": verb, "resource": resource, "group": group}
        for key, value in (("namespace", namespace), ("name", name), ("subresource", subresource)):
            if value:
                attributes[key] = value
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        api = client.AuthorizationV1Api(self.api_client)
        status = self._json(api.create_self_subject_access_review, body).get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or "")

    def list_cluster_policies(self) -> list[dict[str, Any]] | None:
        """The GPU Operator's ClusterPolicies (normally one), or None when the cluster does
        not serve ``clusterpolicies.nvidia.com`` (no GPU Operator installed)."""
        api = client.CustomObjectsApi(self.api_client)
        try:
            body = self._json(api.list_cluster_custom_object, *CLUSTER_POLICY)
        except KubeError as err:
            if err.status == 404:
                return None
            raise
        return body.get("items") or []
