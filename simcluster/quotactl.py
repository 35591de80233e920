"""The quota controller (``status`` of ResourceQuotas), quota admission writes, ``spec.hard``.

Like ``pkg/controller/resourcequota/resource_quota_controller.go`` the controller is
asynchronous: a quota is synced ``quota_sync_s`` after it is created or its ``spec.hard``
changes, and re-synced (replenished) after a pod stops being charged (terminal phase) or an
object it counts is deleted (``resource_quota_monitor.go``); every ``quota_resync_s`` all
quotas are recalculated (``--resource-quota-sync-period``, 5 minutes). A sync writes
``status.hard`` = ``spec.hard`` and ``status.used`` (old usage, overwritten by what the
evaluators can measure, masked to the hard keys) through ``resourcequotas/status`` as field
manager ``kube-controller-manager``. Until the first sync a new quota has an empty status,
so admission does not enforce it yet, exactly as on a real cluster.

Admission (``admission/plugin/resourcequota/controller.go``) charges a create at once: it
writes the quota's new ``status.used`` (manager ``kube-apiserver``, the loopback client)
before the object is stored; a dry run checks without writing.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from simcluster import quota as q
from simcluster.errors import ApiError
from simcluster.resources import RESOURCES, RT, ResourceType

CONTROLLER_MANAGER = "kube-controller-manager"
APISERVER = "kube-apiserver"


class QuotaOps:
    """Quota status upkeep of :class:`~simcluster.cluster.SimCluster` (a mixin)."""

    quota_sync_s: float = 0.1
    quota_resync_s: float = 300.0

    # ------------------------------------------------------------- compute
    def _quota_status(
        self, quota_obj: dict[str, Any], ns: str, previous: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """What a sync of ``quota_obj`` would write as ``status`` (``syncResourceQuota``)."""
        spec_hard = dict((quota_obj.get("spec") or {}).get("hard") or {})
        old = (previous if previous is not None else quota_obj).get("status") or {}
        used: dict[str, str] = dict(old.get("used") or {})
        infos = [r.info for r in self.store.in_namespace("pods", ns) if r.info is not None]
        for k, v in q.calculate_pod_usage(quota_obj, infos).items():
            used[k] = str(v)
        scoped = bool(q.scope_selectors(quota_obj))
        for key in spec_hard:
            rt = count_resource(key)
            if rt is not None and rt.name != "pods":
                used[key] = "0" if scoped else str(self.store.count(rt.name, ns))
        used = {k: v for k, v in used.items() if k in spec_hard}
        return {"hard": spec_hard, "used": used}

    def refresh_quotas(self, ns: str) -> None:
        """Sync every quota in ``ns`` now (in-process helper; the controller does it later)."""
        with self.store.lock:
            for rec in list(self.store.in_namespace("resourcequotas", ns)):
                self._sync_quota(ns, rec.name)

    # ---------------------------------------------------------- controller
    def enqueue_quota(self, ns: str, name: str, delay: float | None = None) -> None:
        """``enqueueResourceQuota``: sync this quota after ``quota_sync_s``."""
        self.controllers.add_after(
            ("quota", ns, name),
            self.quota_sync_s if delay is None else delay,
            lambda: self._sync_quota_task(ns, name),
        )

    def replenish_quotas(self, ns: str, rt: ResourceType) -> None:
        """``replenishQuota``: re-sync the quotas of ``ns`` whose ``status.hard`` tracks ``rt``."""
        if (rt.name, rt.group) in q.IGNORED:
            return
        for rec in self.store.in_namespace("resourcequotas", ns):
            hard = (rec.obj().get("status") or {}).get("hard") or {}
            if rt.name == "pods":
                hit = any(q.is_pod_quota_key(k) for k in hard)
            else:
                hit = any(q.count_key(rt.name, rt.group, k) for k in hard)
            if hit:
                self.enqueue_quota(ns, rec.name)

    def quota_on_write(
        self, rt: ResourceType, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        """Informer handlers: quota add/spec change, pod stops being charged, object deleted."""
        if rt.name == "resourcequotas":
            if new is None:
                return
            spec_hard = (new.get("spec") or {}).get("hard") or {}
            if old is None or not q.equal_lists(
                spec_hard, (old.get("spec") or {}).get("hard") or {}
            ):
                self.enqueue_quota(ns, new["metadata"]["name"])
            return
        if not rt.namespaced:
            return
        if new is None or (
            rt.name == "pods"
            and old is not None
            and q.pod_quota_info(old).counted()
            and not q.pod_quota_info(new).counted()
        ):
            self.replenish_quotas(ns, rt)

    def _sync_quota_task(self, ns: str, name: str) -> None:
        if self.faults.config.quota_controller_paused:
            # A stalled controller: keep the work and look again shortly.
            self.enqueue_quota(ns, name, delay=max(self.quota_sync_s, 0.1))
            return
        with self.store.lock:
            self._sync_quota(ns, name)

    def _sync_quota(self, ns: str, name: str) -> None:
        rec = self.store.get("resourcequotas", ns, name)
        if rec is None:
            return
        obj = rec.obj()
        status = obj.get("status") or {}
        new_status = self._quota_status(obj, ns)
        dirty = (
            "hard" not in status
            or "used" not in status
            or not q.equal_lists(new_status["hard"], status.get("hard") or {})
            or not q.equal_lists(new_status["used"], status.get("used") or {})
        )
        if dirty:
            self._write_status(RT["resourcequotas"], ns, name, new_status, CONTROLLER_MANAGER)

    def quota_full_resync(self) -> None:
        """``enqueueAll`` every ``quota_resync_s``: recalculates usage nothing else triggers
        (for example pods stuck terminating past their grace period)."""
        with self.store.lock:
            keys = [(r.namespace, r.name) for r in self.store.objects["resourcequotas"].values()]
        for ns, name in keys:
            self.enqueue_quota(ns, name)
        if self.quota_resync_s > 0:
            self.controllers.add_after(
                ("quota-resync",), self.quota_resync_s, self.quota_full_resync
            )

    # ----------------------------------------------------------- admission
    def admit_quota(
        self, rt: ResourceType, ns: str, obj: dict[str, Any], dry_run: bool = False
    ) -> None:
        """The ResourceQuota admission plugin for a create (charges ``status.used``)."""
        if not rt.namespaced:
            return
        recs = sorted(self.store.in_namespace("resourcequotas", ns), key=lambda r: r.name)
        if not recs:
            return
        quotas = [r.obj() for r in recs]
        info = q.pod_quota_info(obj) if rt.name == "pods" else None
        try:
            changes = q.check_request(rt.name, rt.group, quotas, info, time.time())
        except q.QuotaDenied as exc:
            name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
            raise forbidden(rt, name, str(exc)) from None
        if dry_run:
            return
        for i, used in changes:
            st = copy.deepcopy(quotas[i].get("status") or {})
            st["used"] = used
            self._write_status(RT["resourcequotas"], ns, recs[i].name, st, APISERVER)

    # -------------------------------------------------------------- helpers
    def _write_status(
        self, rt: ResourceType, ns: str, name: str, status: dict[str, Any], manager: str
    ) -> bytes:
        """An ``UpdateStatus`` by a system component (through the status subresource)."""
        rec = self._existing(rt, ns, name)
        obj = rec.obj()
        obj["status"] = status
        return self._commit(rt, ns, rec, obj, "status", {}, manager)


def forbidden(rt: ResourceType, name: str, reason: str) -> ApiError:
    """``admission.NewForbidden``: ``pods "x" is forbidden: <reason>``."""
    qualified = rt.name + (f".{rt.group}" if rt.group else "")
    details: dict[str, Any] = {"name": name, "kind": rt.name}
    if rt.group:
        details["group"] = rt.group
    return ApiError(403, f'{qualified} "{name}" is forbidden: {reason}', "Forbidden", details)


def count_resource(key: str) -> ResourceType | None:
    """The namespaced, quota-evaluated resource an object-count key refers to."""
    rt: ResourceType | None = None
    if key.startswith("count/"):
        name, _, group = key[6:].partition(".")
        rt = next((r for r in RESOURCES if r.name == name and r.group == group), None)
    elif key in q.LEGACY_COUNT:
        rt = RT.get(q.LEGACY_COUNT[key])
    if rt is None or not rt.namespaced or (rt.name, rt.group) in q.IGNORED:
        return None
    return rt
