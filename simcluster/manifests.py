"""``kubectl apply -f`` for the simulator's own setup: load manifests as the admin.

The lead's test harness and the demo load the project's ``deploy/kubernetes/*.yaml``
(ServiceAccount, ClusterRole, bindings, ...) with :func:`apply_file`. Each object goes
through the normal create or update path, so validation and admission apply as they would
to ``kubectl apply``; like kubectl, an object whose namespace does not exist fails with
the API's 404 (apply the Namespace first).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from simcluster.errors import ApiError
from simcluster.resources import RESOURCES, ResourceType

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

MANAGER = "kubectl-client-side-apply"


def resource_type_of(obj: dict[str, Any]) -> ResourceType:
    """The served type of a manifest object (``apiVersion`` + ``kind``)."""
    api_version, kind = obj.get("apiVersion") or "", obj.get("kind") or ""
    for rt in RESOURCES:
        if rt.api_version == api_version and rt.kind == kind:
            return rt
    raise ApiError(404, f'no matches for kind "{kind}" in version "{api_version}"', "NotFound")


def apply_objects(cluster: SimCluster, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Create or update each object in order; returns the stored objects."""
    out = []
    for obj in objs:
        rt = resource_type_of(obj)
        body = copy.deepcopy(obj)
        meta = body.setdefault("metadata", {})
        ns = (meta.get("namespace") or "default") if rt.namespaced else ""
        name = meta.get("name") or ""
        with cluster.store.lock:
            exists = cluster.store.get(rt.name, ns, name) is not None
        if exists:
            meta.pop("resourceVersion", None)
            raw = cluster.op_update(rt, ns, name, "", body, {}, MANAGER)
        else:
            _, raw = cluster.op_create(rt, ns, body, {}, MANAGER)
        out.append(json.loads(raw))
    return out


def apply_file(cluster: SimCluster, path: str | Path) -> list[dict[str, Any]]:
    """Apply every document of a (multi-document) YAML manifest."""
    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    items: list[dict[str, Any]] = []
    for d in docs:
        if d.get("kind") == "List" or str(d.get("kind", "")).endswith("List"):
            items.extend(d.get("items") or [])
        else:
            items.append(d)
    return apply_objects(cluster, items)
