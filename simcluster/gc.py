"""A small garbage collector for ``metadata.ownerReferences`` and the GC finalizers.

After ``pkg/controller/garbagecollector/garbagecollector.go``:

- when an owner is gone, a dependent whose owners are all gone is deleted (background
  propagation); one that still has a live owner loses only the dangling references;
- an owner deleted with ``propagationPolicy: Orphan`` (finalizer ``orphan``) has the
  references to it removed from its dependents, then the finalizer;
- an owner deleted with ``propagationPolicy: Foreground`` (finalizer ``foregroundDeletion``)
  has its dependents deleted; the finalizer goes once no dependent with
  ``blockOwnerDeletion: true`` is left.

An owner reference is live when an object of that kind and name with that uid exists
(in the dependent's namespace for namespaced kinds). Work runs ``gc_sync_s`` after the event.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from simcluster import deletion
from simcluster.errors import ApiError
from simcluster.resources import RESOURCES, ResourceType

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

CONTROLLER = "kube-controller-manager"
Key = tuple[str, str, str]  # resource, namespace, name


def _by_kind(api_version: str, kind: str) -> ResourceType | None:
    group = api_version.split("/")[0] if "/" in api_version else ""
    return next((r for r in RESOURCES if r.kind == kind and r.group == group), None)


class GarbageCollector:
    """Owner index plus the three GC behaviours above."""

    def __init__(self, cluster: SimCluster, sync_s: float = 0.05) -> None:
        self.cluster = cluster
        self.sync_s = sync_s
        self.dependents: dict[str, set[Key]] = {}

    def register(self, resource: str, ns: str, obj: dict[str, Any]) -> None:
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("uid"):
                self.dependents.setdefault(ref["uid"], set()).add(
                    (resource, ns, obj["metadata"]["name"])
                )

    def _unregister(self, resource: str, ns: str, obj: dict[str, Any]) -> None:
        key = (resource, ns, obj["metadata"]["name"])
        for ref in obj["metadata"].get("ownerReferences") or []:
            deps = self.dependents.get(ref.get("uid", ""))
            if deps is not None:
                deps.discard(key)
                if not deps:
                    del self.dependents[ref["uid"]]

    def on_write(
        self, rt: ResourceType, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        old_refs = (old or {}).get("metadata", {}).get("ownerReferences")
        if (
            old is not None
            and old_refs
            and (new is None or new["metadata"].get("ownerReferences") != old_refs)
        ):
            self._unregister(rt.name, ns, old)
        if new is not None and new["metadata"].get("ownerReferences"):
            self.register(rt.name, ns, new)
        if new is None and old is not None:
            uid = old["metadata"].get("uid", "")
            if uid in self.dependents:
                self._queue(("gc-dependents", uid), lambda: self._collect(uid))
            for ref in old["metadata"].get("ownerReferences") or []:
                rref = _by_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
                if rref is not None and ref.get("blockOwnerDeletion"):
                    owner_ns = ns if rref.namespaced else ""
                    self._queue_owner(rref, owner_ns, ref.get("name", ""))
        if new is not None and new["metadata"].get("deletionTimestamp"):
            fins = new["metadata"].get("finalizers") or []
            if deletion.ORPHAN in fins or deletion.FOREGROUND in fins:
                self._queue_owner(rt, ns, new["metadata"]["name"])

    def _queue(self, key: Any, fn: Any) -> None:
        self.cluster.controllers.add_after(key, self.sync_s, fn)

    def _queue_owner(self, rt: ResourceType, ns: str, name: str) -> None:
        self._queue(("gc-owner", rt.name, ns, name), lambda: self._finalize_owner(rt, ns, name))

    def _live(self, ref: dict[str, Any], dep_ns: str) -> bool:
        rt = _by_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        if rt is None:
            return False
        rec = self.cluster.store.get(rt.name, dep_ns if rt.namespaced else "", ref.get("name", ""))
        return rec is not None and rec.obj()["metadata"].get("uid") == ref.get("uid")

    def _collect(self, owner_uid: str) -> None:
        """``attemptToDeleteItem`` for the dependents of a vanished owner."""
        cluster = self.cluster
        with cluster.store.lock:
            for resource, ns, name in sorted(self.dependents.get(owner_uid, set())):
                rec = cluster.store.get(resource, ns, name)
                if rec is None:
                    continue
                obj = rec.obj()
                refs = obj["metadata"].get("ownerReferences") or []
                live = [r for r in refs if self._live(r, ns)]
                rt = next(r for r in RESOURCES if r.name == resource)
                try:
                    if not live:
                        deletion.delete_object(
                            cluster,
                            rt,
                            ns,
                            name,
                            deletion.DeleteOptions(
                                propagation="Background", uid=obj["metadata"].get("uid")
                            ),
                        )
                    elif len(live) != len(refs):
                        self._set_refs(rt, ns, rec, live)
                except ApiError as err:
                    if err.code not in (404, 409):
                        raise

    def _set_refs(self, rt: ResourceType, ns: str, rec: Any, refs: list[dict[str, Any]]) -> None:
        new = rec.obj()
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self.cluster._commit(rt, ns, rec, new, "", {}, CONTROLLER)

    def _finalize_owner(self, rt: ResourceType, ns: str, name: str) -> None:
        """Process ``orphan`` / ``foregroundDeletion`` on a deleting owner."""
        cluster = self.cluster
        with cluster.store.lock:
            rec = cluster.store.get(rt.name, ns if rt.namespaced else "", name)
            if rec is None:
                return
            owner = rec.obj()
            meta = owner["metadata"]
            fins = meta.get("finalizers") or []
            if not meta.get("deletionTimestamp"):
                return
            uid = meta.get("uid", "")
            deps = sorted(self.dependents.get(uid, set()))
            if deletion.ORPHAN in fins:
                for resource, dns, dname in deps:
                    drec = cluster.store.get(resource, dns, dname)
                    if drec is None:
                        continue
                    refs = [
                        r
                        for r in drec.obj()["metadata"].get("ownerReferences") or []
                        if r.get("uid") != uid
                    ]
                    drt = next(r for r in RESOURCES if r.name == resource)
                    self._set_refs(drt, dns, drec, refs)
                self._drop_finalizer(rt, ns, name, deletion.ORPHAN)
                return
            if deletion.FOREGROUND not in fins:
                return
            blocking = 0
            for resource, dns, dname in deps:
                drec = cluster.store.get(resource, dns, dname)
                if drec is None:
                    continue
                dobj = drec.obj()
                if any(
                    r.get("uid") == uid and r.get("blockOwnerDeletion")
                    for r in dobj["metadata"].get("ownerReferences") or []
                ):
                    blocking += 1
                if not dobj["metadata"].get("deletionTimestamp"):
                    drt = next(r for r in RESOURCES if r.name == resource)
                    try:
                        deletion.delete_object(
                            cluster,
                            drt,
                            dns,
                            dname,
                            deletion.DeleteOptions(propagation="Foreground"),
                        )
                    except ApiError as err:
                        if err.code != 404:
                            raise
            if not blocking:
                self._drop_finalizer(rt, ns, name, deletion.FOREGROUND)

    def _drop_finalizer(self, rt: ResourceType, ns: str, name: str, fin: str) -> None:
        rec = self.cluster.store.get(rt.name, ns if rt.namespaced else "", name)
        if rec is None:
            return
        new = copy.deepcopy(rec.obj())
        fins = [f for f in new["metadata"].get("finalizers") or [] if f != fin]
        if fins:
            new["metadata"]["finalizers"] = fins
        else:
            new["metadata"].pop("finalizers", None)
        self.cluster._commit(rt, ns, rec, new, "", {}, CONTROLLER)
