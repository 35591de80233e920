"""Namespace lifecycle: admission, DELETE, and the namespace controller that empties them.

- ``staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/admission.go``:
  ``default``, ``kube-system`` and ``kube-public`` may not be deleted; nothing can be
  created in a namespace that is ``Terminating`` (403 with the ``NamespaceTerminating``
  cause). Deletes and updates stay allowed.
- ``pkg/registry/core/namespace/storage/storage.go`` (``REST.Delete``): the first DELETE only
  sets ``deletionTimestamp`` and phase ``Terminating`` and answers the namespace; another
  DELETE while ``spec.finalizers`` is not empty is a 409.
- ``pkg/controller/namespace/namespace_controller.go`` and ``deletion/
  namespaced_resources_deleter.go`` + ``status_condition_utils.go``: a namespace event is
  handled ``namespace_sync_s`` later (the real ``namespaceDeletionGracePeriod`` is 5 s); the
  controller deletes every namespaced resource in it (``deletecollection``, so pods go
  gracefully), records the five deletion conditions, waits ``estimate/2 + 1`` seconds while
  content remains (the estimate is the longest pod grace period), then removes the
  ``kubernetes`` finalizer and deletes the namespace.
- ``pkg/controlplane/controller/systemnamespaces``: ``kube-node-lease`` is recreated when
  deleted (checked every ``60 s`` like the real controller).
"""

from __future__ import annotations

import copy
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from simcluster.errors import ApiError, not_found
from simcluster.resources import RESOURCES, RT, ResourceType

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster
    from simcluster.deletion import DeleteOptions

IMMORTAL = frozenset({"default", "kube-system", "kube-public"})
RECREATED = ("kube-node-lease",)
CONTROLLER = "kube-controller-manager"
_CONDITION_TYPES = (
    "NamespaceDeletionDiscoveryFailure",
    "NamespaceDeletionGroupVersionParsingFailure",
    "NamespaceDeletionContentFailure",
    "NamespaceContentRemaining",
    "NamespaceFinalizersRemaining",
)
_OK = {
    "NamespaceDeletionDiscoveryFailure": (
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    "NamespaceDeletionGroupVersionParsingFailure": (
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    "NamespaceDeletionContentFailure": (
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    "NamespaceContentRemaining": ("ContentRemoved", "All content successfully removed"),
    "NamespaceFinalizersRemaining": ("ContentRemoved", "All content successfully removed"),
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def deletable_resources() -> list[ResourceType]:
    """Namespaced, stored resources that support delete (what discovery would list)."""
    return [r for r in RESOURCES if r.namespaced and "delete" in getattr(r, "verbs", ("delete",))]


def admit_create(cluster: SimCluster, rt: ResourceType, ns: str, obj: dict[str, Any]) -> None:
    """NamespaceLifecycle for a create in ``ns`` (a 403 while it terminates)."""
    if not rt.namespaced or rt.name == "namespaces":
        return
    rec = cluster.store.get("namespaces", "", ns)
    if rec is None or rec.fields.get("status.phase") != "Terminating":
        return
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "Unknown"
    raise terminating_forbidden(rt.name + (f".{rt.group}" if rt.group else ""), rt, name, ns)


def terminating_forbidden(qualified: str, rt: ResourceType, name: str, ns: str) -> ApiError:
    """The lifecycle plugin's 403 for creates (also evictions) in a terminating namespace."""
    details: dict[str, Any] = {"name": name, "kind": rt.name}
    if rt.group:
        details["group"] = rt.group
    details["causes"] = [
        {
            "reason": "NamespaceTerminating",
            "message": f"namespace {ns} is being terminated",
            "field": "metadata.namespace",
        }
    ]
    return ApiError(
        403,
        f'{qualified} "{name}" is forbidden: unable to create new content in namespace {ns} '
        "because it is being terminated",
        "Forbidden",
        details,
    )


def delete_namespace(cluster: SimCluster, name: str, opts: DeleteOptions) -> dict[str, Any]:
    """``namespace REST.Delete`` (caller holds the store lock)."""
    from simcluster import deletion

    if name in IMMORTAL:
        raise ApiError(
            403,
            f'namespaces "{name}" is forbidden: this namespace may not be deleted',
            "Forbidden",
            {"name": name, "kind": "namespaces"},
        )
    rt = RT["namespaces"]
    rec = cluster._existing(rt, "", name)
    obj = rec.obj()
    meta = obj["metadata"]
    if opts.uid is not None and opts.uid != meta.get("uid"):
        raise ApiError(
            409,
            f'Operation cannot be fulfilled on namespaces "{name}": Precondition failed: UID in '
            f"precondition: {opts.uid}, UID in object meta: {meta.get('uid')}",
            "Conflict",
            {"name": name, "kind": "namespaces"},
        )
    if not meta.get("deletionTimestamp"):
        old = copy.deepcopy(obj)
        meta["deletionTimestamp"] = _now()
        obj.setdefault("status", {})["phase"] = "Terminating"
        if opts.orphan is False and meta.get("finalizers"):
            meta["finalizers"] = [f for f in meta["finalizers"] if f != deletion.ORPHAN]
        if opts.dry_run:
            return obj
        return deletion._store_update(cluster, rt, "", old, obj)
    if (obj.get("spec") or {}).get("finalizers"):
        raise ApiError(
            409,
            f'Operation cannot be fulfilled on namespaces "{name}": The system is ensuring all '
            "content is removed from this namespace.  Upon completion, this namespace will "
            "automatically be purged by the system.",
            "Conflict",
            {"name": name, "kind": "namespaces"},
        )
    if meta.get("finalizers"):
        old = copy.deepcopy(obj)
        deletion.mark_as_deleting(meta)
        return obj if opts.dry_run else deletion._store_update(cluster, rt, "", old, obj)
    if opts.dry_run:
        return obj
    return deletion.remove_now(cluster, rt, "", name)


class NamespaceController:
    """``NamespaceController`` + ``namespacedResourcesDeleter`` for the simulator."""

    def __init__(self, cluster: SimCluster, sync_s: float = 5.0) -> None:
        self.cluster = cluster
        self.sync_s = sync_s

    def on_write(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """``enqueueNamespace``: only namespaces being deleted, ``sync_s`` later."""
        if new is None:
            if old is not None and old["metadata"]["name"] in RECREATED:
                self._queue_system_namespaces()
            return
        if new["metadata"].get("deletionTimestamp"):
            self.enqueue(new["metadata"]["name"], self.sync_s)

    def enqueue(self, name: str, delay: float) -> None:
        self.cluster.controllers.add_after(("namespace", name), delay, lambda: self.sync(name))

    def sync(self, name: str) -> None:
        cluster = self.cluster
        with cluster.store.lock:
            rec = cluster.store.get("namespaces", "", name)
            if rec is None:
                return
            ns = rec.obj()
            if not ns["metadata"].get("deletionTimestamp"):
                return
            if (ns.get("status") or {}).get("phase") != "Terminating":
                st = copy.deepcopy(ns.get("status") or {})
                st["phase"] = "Terminating"
                cluster._write_status(RT["namespaces"], "", name, st, CONTROLLER)
                ns = cluster.store.get("namespaces", "", name).obj()  # type: ignore[union-attr]
            if not (ns.get("spec") or {}).get("finalizers"):
                self._delete_namespace(name)
                return
            estimate, remaining, by_finalizer, errors = self._delete_all_content(ns)
            self._update_conditions(name, remaining, by_finalizer, errors)
            if estimate > 0 or remaining or errors:
                wait = max(estimate, 0) // 2 + 1
                self.enqueue(name, float(wait))
                return
            self._finalize(name)

    def _delete_all_content(
        self, ns: dict[str, Any]
    ) -> tuple[int, dict[str, int], dict[str, int], list[str]]:
        from simcluster import deletion

        cluster = self.cluster
        name = ns["metadata"]["name"]
        deleted_at = _epoch(ns["metadata"]["deletionTimestamp"])
        estimate = 0
        remaining: dict[str, int] = {}
        by_finalizer: dict[str, int] = {}
        errors: list[str] = []
        for rt in deletable_resources():
            local = 0
            if rt.name == "pods":
                for p in cluster.store.in_namespace("pods", name):
                    if p.info is not None and p.info.terminal:
                        continue
                    grace = int(
                        (p.obj().get("spec") or {}).get("terminationGracePeriodSeconds") or 0
                    )
                    local = max(local, grace)
                local = max(0, local - int(time.time() - deleted_at))
            try:
                deletion.delete_collection(cluster, rt, name, {}, {"orphanDependents": False})
            except ApiError as err:
                errors.append(f"{rt.name}.{rt.group}: {err.message}")
                continue
            left = list(cluster.store.in_namespace(rt.name, name))
            if not left:
                continue
            fins: dict[str, int] = {}
            for r in left:
                for f in r.obj()["metadata"].get("finalizers") or []:
                    fins[f] = fins.get(f, 0) + 1
            if local:
                remaining[f"{rt.name}.{rt.group}"] = len(left)
            elif fins:
                local = 15  # finalizerEstimateSeconds
                remaining[f"{rt.name}.{rt.group}"] = len(left)
            else:
                errors.append(
                    f"unexpected items still remain in namespace: {name} for gvr: "
                    f"{rt.group}/{rt.version}, Resource={rt.name}"
                )
            for f, n in fins.items():
                by_finalizer[f] = by_finalizer.get(f, 0) + n
            estimate = max(estimate, local)
        return estimate, remaining, by_finalizer, errors

    def _update_conditions(
        self, name: str, remaining: dict[str, int], by_finalizer: dict[str, int], errors: list[str]
    ) -> None:
        cluster = self.cluster
        ns = cluster.store.get("namespaces", "", name).obj()  # type: ignore[union-attr]
        status = copy.deepcopy(ns.get("status") or {})
        new: dict[str, tuple[str, str, str]] = {}
        if remaining:
            parts = sorted(f"{r} has {n} resource instances" for r, n in remaining.items())
            new["NamespaceContentRemaining"] = (
                "True",
                "SomeResourcesRemain",
                "Some resources are remaining: " + ", ".join(parts),
            )
        if by_finalizer:
            parts = sorted(f"{f} in {n} resource instances" for f, n in by_finalizer.items())
            new["NamespaceFinalizersRemaining"] = (
                "True",
                "SomeFinalizerRemain",
                "Some finalizers are remaining: " + ", ".join(parts),
            )
        if errors:
            new["NamespaceDeletionContentFailure"] = (
                "True",
                "ContentDeletionFailed",
                f"Failed to delete all resource types, {len(errors)} remaining: "
                + ", ".join(sorted(errors)),
            )
        conds = status.setdefault("conditions", [])
        changed = False
        for ctype in _CONDITION_TYPES:
            want = new.get(ctype) or ("False", *_OK[ctype])
            cur = next((c for c in conds if c.get("type") == ctype), None)
            if cur is None:
                conds.append(
                    {
                        "type": ctype,
                        "status": want[0],
                        "lastTransitionTime": _now(),
                        "reason": want[1],
                        "message": want[2],
                    }
                )
                changed = True
            elif (cur.get("status"), cur.get("reason"), cur.get("message")) != want:
                if cur.get("status") != want[0]:
                    cur["lastTransitionTime"] = _now()
                cur["status"], cur["reason"], cur["message"] = want
                changed = True
        if changed:
            cluster._write_status(RT["namespaces"], "", name, status, CONTROLLER)

    def _finalize(self, name: str) -> None:
        """``finalizeNamespace`` (PUT .../finalize without ``kubernetes``), then delete."""
        from simcluster import deletion

        cluster = self.cluster
        rec = cluster.store.get("namespaces", "", name)
        if rec is None:
            return
        old = rec.obj()
        new = copy.deepcopy(old)
        fins = [f for f in (new.get("spec") or {}).get("finalizers") or [] if f != "kubernetes"]
        new.setdefault("spec", {})["finalizers"] = sorted(set(fins))
        if not new["spec"]["finalizers"]:
            del new["spec"]["finalizers"]
        deletion._store_update(cluster, RT["namespaces"], "", old, new)
        if not (new.get("spec") or {}).get("finalizers"):
            self._delete_namespace(name)

    def _delete_namespace(self, name: str) -> None:
        from simcluster import deletion

        cluster = self.cluster
        rec = cluster.store.get("namespaces", "", name)
        if rec is None:
            return
        try:
            delete_namespace(
                cluster, name, deletion.DeleteOptions(uid=rec.obj()["metadata"].get("uid"))
            )
        except ApiError as err:
            if err.code != 404:
                raise

    # ------------------------------------------------------ system namespaces
    def _queue_system_namespaces(self, delay: float = 60.0) -> None:
        self.cluster.controllers.add_after(("system-namespaces",), delay, self._ensure_system)

    def _ensure_system(self) -> None:
        from simcluster.fleet import namespace_object

        cluster = self.cluster
        with cluster.store.lock:
            missing = [n for n in RECREATED if cluster.store.get("namespaces", "", n) is None]
        for n in missing:
            try:
                cluster.create("namespaces", namespace_object(n, None, _now()))
            except ApiError:
                self._queue_system_namespaces()
                return


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def require_namespace(cluster: SimCluster, ns: str) -> None:
    """404 for a create in a namespace that does not exist (lifecycle's live lookup)."""
    if cluster.store.get("namespaces", "", ns) is None:
        raise not_found("namespaces", ns)
