"""The simulated cluster: API semantics on top of the store (CRUD, quota, eviction, lists).

:class:`SimCluster` is also the in-process entry point for tests::

    sim = SimCluster.from_fleet("simcluster/fleets/demo.yaml")
    sim.start(port=0)
    sim.write_kubeconfig(tmp / "kubeconfig")
    sim.faults.update(error_rate=1.0)
    sim.stop()
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import logging
import math
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from simcluster import quota as q
from simcluster.errors import ApiError, already_exists, conflict, invalid, not_found
from simcluster.faults import Faults
from simcluster.fleet import Fleet, load_fleet, namespace_object, now_iso
from simcluster.kubeconfig import write_kubeconfig
from simcluster.patch import (
    json_patch,
    merge_patch,
    record_update,
    server_side_apply,
    strategic_merge_patch,
)
from simcluster.resources import BY_PATH, RESOURCES, ResourceType
from simcluster.selectors import parse_field_selector, parse_label_selector
from simcluster.store import Record, Store

log = logging.getLogger("simcluster")

RT: dict[str, ResourceType] = {r.name: r for r in RESOURCES}
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
EXPIRED_MSG = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)
_NAME_OK = set("abcdefghijklmnopqrstuvwxyz0123456789-.")
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _strip_volatile(obj: dict[str, Any]) -> dict[str, Any]:
    o = copy.deepcopy(obj)
    meta = o.get("metadata") or {}
    meta.pop("resourceVersion", None)
    for m in meta.get("managedFields") or []:
        m.pop("time", None)
    return o


class SimCluster:
    """An in-memory Kubernetes API server with GPU nodes, served over HTTP."""

    def __init__(
        self,
        fleet: Fleet | None = None,
        *,
        continue_ttl: float = 300.0,
        history_size: int = 10_000,
        token: str | None = None,
        mig_step_s: float = 0.2,
        bookmark_interval_s: float = 5.0,
    ) -> None:
        self.store = Store(history_size)
        self.faults = Faults()
        self.continue_ttl = continue_ttl
        self.token = token
        self.bookmark_interval_s = bookmark_interval_s
        self.name = fleet.name if fleet else "simcluster"
        self.started_at = time.time()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""
        from simcluster.migmanager import MigManager

        self.mig = MigManager(self, step_s=mig_step_s)
        self._load(fleet or Fleet())

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def from_fleet(cls, src: str | Path | dict[str, Any] | Fleet | None, **kw: Any) -> SimCluster:
        """Build from a fleet file path, a fleet dict (compact schema) or a :class:`Fleet`."""
        fleet = src if isinstance(src, Fleet) else load_fleet(src)
        return cls(fleet, **kw)

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve in a background thread; returns the base URL (also ``self.url``)."""
        from simcluster.server import make_server

        self._server = make_server(self, host, port)
        real_port = self._server.server_address[1]
        self.url = f"http://{host}:{real_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="simcluster-http", daemon=True
        )
        self._thread.start()
        return self.url

    def serve_forever(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Serve in the calling thread (the CLI)."""
        from simcluster.server import make_server

        self._server = make_server(self, host, port)
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop serving; open watches end."""
        self.store.close()
        self.mig.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig for this server (context ``simcluster``)."""
        if not self.url:
            raise RuntimeError("start() the server before writing a kubeconfig")
        return write_kubeconfig(path, self.url, self.token)

    def __enter__(self) -> SimCluster:
        if not self.url:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- load
    def _load(self, fleet: Fleet) -> None:
        s = self.store
        with s.lock:
            ts = now_iso()
            names = {n["metadata"]["name"] for n in fleet.namespaces}
            for ns in SYSTEM_NAMESPACES:
                if ns not in names:
                    s.put("namespaces", namespace_object(ns, None, ts), "ADDED", emit=False)
            for kind, objs in (
                ("namespaces", fleet.namespaces),
                ("priorityclasses", fleet.priorityclasses),
                ("nodes", fleet.nodes),
                ("configmaps", fleet.configmaps),
                ("pods", fleet.pods),
            ):
                for obj in objs:
                    s.put(kind, obj, "ADDED", emit=False)
            for obj in fleet.resourcequotas:
                ns = obj["metadata"]["namespace"]
                obj["status"] = self._quota_status(obj, ns)
                record_update(None, obj, "simcluster-fleet")
                s.put("resourcequotas", obj, "ADDED", emit=False)
            self.mig.load(fleet.nodes)
            s.compact()

    # -------------------------------------------------------- python helpers
    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any]:
        """Decoded object or 404 :class:`ApiError`."""
        with self.store.lock:
            rec = self.store.get(resource, namespace, name)
            if rec is None:
                raise not_found(resource, name)
            return rec.obj()

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """All objects of a resource (decoded; for tests and small fleets)."""
        with self.store.lock:
            keys, lo, hi = self.store.key_range(resource, namespace)
            objs = self.store.objects[resource]
            return [objs[k].obj() for k in keys[lo:hi]]

    def create(
        self, resource: str, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """Create through the same path as ``POST`` (admission included)."""
        rt = RT[resource]
        ns = (
            namespace
            or (obj.get("metadata") or {}).get("namespace")
            or ("default" if rt.namespaced else "")
        )
        _, raw = self.op_create(rt, ns, copy.deepcopy(obj), {}, "simcluster")
        return json.loads(raw)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> dict[str, Any]:
        """Change a pod's phase through the status subresource (quota recomputes)."""
        body = _dumps({"status": {"phase": phase}})
        _, raw = self.op_patch(RT["pods"], namespace, name, "status", body, MERGE, {}, "kubelet")
        return json.loads(raw)

    def compact_history(self) -> None:
        """Drop the watch history: watches from older resourceVersions now get 410."""
        self.store.compact()

    def counts(self) -> dict[str, int]:
        with self.store.lock:
            return {r.name: self.store.count(r.name) for r in RESOURCES}

    # -------------------------------------------------------------- helpers
    @staticmethod
    def resource_for(group_version: str, name: str) -> ResourceType | None:
        return BY_PATH.get((group_version, name))

    def _require_ns(self, rt: ResourceType, ns: str) -> None:
        if rt.namespaced and self.store.get("namespaces", "", ns) is None:
            raise not_found("namespaces", ns)

    def _existing(self, rt: ResourceType, ns: str, name: str) -> Record:
        rec = self.store.get(rt.name, ns if rt.namespaced else "", name)
        if rec is None:
            raise not_found(rt.name, name)
        return rec

    # ----------------------------------------------------------------- list
    def op_list(self, rt: ResourceType, ns: str | None, params: dict[str, str], path: str) -> bytes:
        """One list page: a join of cached bytes, with ``limit``/``continue`` pagination."""
        limit = _int_param(params, "limit")
        lsel = parse_label_selector(params.get("labelSelector"))
        fsel = parse_field_selector(params.get("fieldSelector"), rt.fields)
        token = params.get("continue") or ""
        s = self.store
        with s.lock:
            start_key: tuple[str, str] | None = None
            if token:
                list_rv, start_key = self._decode_continue(token, path)
            else:
                list_rv = s.rv
            keys, lo, hi = s.key_range(rt.name, ns)
            i = lo
            if start_key is not None:
                import bisect

                i = max(lo, bisect.bisect_right(keys, start_key, lo, hi))
            objs = s.objects[rt.name]
            items: list[bytes] = []
            while i < hi:
                rec = objs[keys[i]]
                i += 1
                if lsel is not None and not lsel(rec.labels):
                    continue
                if fsel is not None and not fsel(rec.fields):
                    continue
                items.append(rec.raw)
                if limit and len(items) >= limit:
                    break
            meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
            if limit and len(items) >= limit and i < hi:
                meta["continue"] = self._encode_continue(list_rv, keys[i - 1])
                if lsel is None and fsel is None:
                    meta["remainingItemCount"] = hi - i
        head = (
            b'{"kind":"'
            + rt.kind.encode()
            + b'List","apiVersion":"'
            + rt.api_version.encode()
            + b'","metadata":'
            + _dumps(meta)
            + b',"items":['
        )
        return head + b",".join(items) + b"]}"

    def list_objects(
        self, rt: ResourceType, ns: str | None, params: dict[str, str], path: str
    ) -> dict[str, Any]:
        """Decoded list (used for Table output)."""
        return json.loads(self.op_list(rt, ns, params, path))

    def _encode_continue(self, rv: int, key: tuple[str, str]) -> str:
        payload = {"v": "meta.k8s.io/v1", "rv": rv, "start": list(key), "t": round(time.time(), 3)}
        return base64.urlsafe_b64encode(_dumps(payload)).decode().rstrip("=")

    def _decode_continue(self, token: str, path: str) -> tuple[int, tuple[str, str]]:
        try:
            pad = "=" * (-len(token) % 4)
            data = json.loads(base64.urlsafe_b64decode(token + pad))
            rv = int(data["rv"])
            start = (str(data["start"][0]), str(data["start"][1]))
            issued = float(data["t"])
        except (ValueError, KeyError, TypeError, IndexError, binascii.Error) as exc:
            raise ApiError(400, f"continue key is not valid: {exc}", "BadRequest") from exc
        if self.faults.continue_expired(path) or time.time() - issued > self.continue_ttl:
            raise ApiError(410, EXPIRED_MSG, "Expired")
        return rv, start

    # ------------------------------------------------------------------ get
    def op_get(self, rt: ResourceType, ns: str, name: str) -> bytes:
        with self.store.lock:
            return self._existing(rt, ns, name).raw

    # --------------------------------------------------------------- create
    def op_create(
        self,
        rt: ResourceType,
        ns: str,
        body: Any,
        params: dict[str, str],
        manager: str,
        managed_fields: list[dict[str, Any]] | None = None,
    ) -> tuple[int, bytes]:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request must be a JSON object", "BadRequest")
        self._check_kind(rt, body)
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object", "BadRequest")
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                    "BadRequest",
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        with self.store.lock:
            self._require_ns(rt, ns)
            if not meta.get("name"):
                if meta.get("generateName"):
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                else:
                    raise invalid(
                        rt.kind, "", "metadata.name", "", "name or generateName is required"
                    )
            name = meta["name"]
            _validate_name(rt, name)
            if self.store.get(rt.name, ns if rt.namespaced else "", name) is not None:
                raise already_exists(rt.name, name)
            body.setdefault("apiVersion", rt.api_version)
            body.setdefault("kind", rt.kind)
            for k in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
                meta.pop(k, None)
            meta.pop("managedFields", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_iso()
            self._prepare_create(rt, body)
            self._admit_create(rt, ns, body)
            if managed_fields is not None:
                meta["managedFields"] = managed_fields
            else:
                record_update(None, body, manager)
            if params.get("dryRun"):
                return 201, _dumps(body)
            rec = self.store.put(rt.name, body, "ADDED")
            self._after_write(rt, ns, None, body)
            return 201, rec.raw

    def _check_kind(self, rt: ResourceType, body: dict[str, Any]) -> None:
        kind = body.get("kind")
        if kind and kind != rt.kind:
            raise ApiError(
                400,
                f"the API version in the data ({body.get('apiVersion')}) does not match the "
                f"expected API version ({rt.api_version}) or kind {kind!r} is not {rt.kind!r}",
                "BadRequest",
            )

    def _prepare_create(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt.name == "pods":
            _prepare_pod(obj)
            spec = obj["spec"]
            node = spec.get("nodeName")
            status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
            status["qosClass"] = _qos(spec)
            if node:
                status["startTime"] = now_iso()
            obj["status"] = status
        elif rt.name == "namespaces":
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj[
                "metadata"
            ]["name"]
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif rt.name == "resourcequotas":
            obj.setdefault("spec", {})
            obj["spec"]["hard"] = _validate_hard(obj)
            obj["status"] = self._quota_status(obj, obj["metadata"]["namespace"])
        elif rt.name == "nodes":
            obj.setdefault("spec", {})
            obj.setdefault("status", {})
        elif rt.name == "configmaps":
            for k, v in (obj.get("data") or {}).items():
                if not isinstance(v, str):
                    raise invalid(
                        "ConfigMap", obj["metadata"]["name"], f"data[{k}]", v, "must be a string"
                    )

    def _admit_create(self, rt: ResourceType, ns: str, obj: dict[str, Any]) -> None:
        if not rt.namespaced:
            return
        quotas = [r.obj() for r in self.store.in_namespace("resourcequotas", ns)]
        if not quotas:
            return
        name = obj["metadata"]["name"]
        if rt.name == "pods":
            res = q.admit_pod(name, q.pod_quota_info(obj), quotas)
        else:
            res = q.admit_count(rt.name, rt.group, name, quotas)
        if res:
            raise ApiError(res[0], res[1], "Forbidden", {"name": name, "kind": rt.name})

    # --------------------------------------------------------------- update
    def op_update(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        sub: str,
        body: Any,
        params: dict[str, str],
        manager: str,
    ) -> bytes:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request must be a JSON object", "BadRequest")
        self._check_kind(rt, body)
        with self.store.lock:
            rec = self._existing(rt, ns, name)
            meta = body.get("metadata") or {}
            if meta.get("name") and meta["name"] != name:
                raise ApiError(
                    400,
                    f"the name of the object ({meta['name']}) does not match the name on the "
                    f"URL ({name})",
                    "BadRequest",
                )
            rv = meta.get("resourceVersion")
            if rv and str(rv) != str(rec.rv):
                raise conflict(rt.name, name)
            if not rv and rt.name in ("resourcequotas", "nodes", "pods", "namespaces"):
                pass  # unconditional update (allowed for these types in practice)
            return self._commit(rt, ns, rec, body, sub, params, manager)

    def _commit(
        self,
        rt: ResourceType,
        ns: str,
        rec: Record,
        new: dict[str, Any],
        sub: str,
        params: dict[str, str],
        manager: str,
        managed_done: bool = False,
    ) -> bytes:
        """Common tail of update/patch/apply: immutables, status split, no-op detection."""
        old = rec.obj()
        new.setdefault("metadata", {})
        new["apiVersion"] = old.get("apiVersion", rt.api_version)
        new["kind"] = old.get("kind", rt.kind)
        meta = new["metadata"]
        ometa = old["metadata"]
        for k in ("name", "namespace", "uid", "creationTimestamp"):
            if k in ometa:
                meta[k] = ometa[k]
            else:
                meta.pop(k, None)
        if sub == "status":
            merged = copy.deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            new = merged
        elif rt.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if rt.name == "resourcequotas":
            new.setdefault("spec", {})
            new["spec"]["hard"] = _validate_hard(new)
            new["status"] = self._quota_status(new, ns, previous=old)
        if rt.name == "pods" and sub == "status":
            phase = (new.get("status") or {}).get("phase")
            if phase not in (None, "Pending", "Running", "Succeeded", "Failed", "Unknown"):
                raise invalid("Pod", rec.name, "status.phase", phase, "unsupported value")
        if not managed_done:
            new["metadata"]["managedFields"] = ometa.get("managedFields") or []
            record_update(old, new, manager, sub)
        if _strip_volatile(new) == _strip_volatile(old):
            return rec.raw
        if rt.name in ("pods",) and "spec" in new and sub != "status":
            _prepare_pod(new)
        if params.get("dryRun"):
            return _dumps(new)
        out = self.store.put(rt.name, new, "MODIFIED")
        self._after_write(rt, ns, old, new)
        return out.raw

    # ---------------------------------------------------------------- patch
    def op_patch(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        sub: str,
        raw: bytes,
        ctype: str,
        params: dict[str, str],
        manager: str,
    ) -> tuple[int, bytes]:
        ctype = ctype.split(";")[0].strip().lower()
        if ctype == APPLY:
            return self._apply(rt, ns, name, sub, raw, params)
        if ctype not in (MERGE, STRATEGIC, JSONPATCH):
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSONPATCH}, {MERGE}, {APPLY}, {STRATEGIC}",
                "UnsupportedMediaType",
            )
        try:
            patch = json.loads(raw) if raw else {}
        except ValueError as exc:
            raise ApiError(400, f"error decoding patch: {exc}", "BadRequest") from exc
        with self.store.lock:
            rec = self._existing(rt, ns, name)
            cur = rec.obj()
            if ctype == JSONPATCH:
                new = json_patch(cur, patch)
            else:
                if not isinstance(patch, dict):
                    raise ApiError(400, "patch must be a JSON object", "BadRequest")
                prv = (patch.get("metadata") or {}).get("resourceVersion")
                if prv and str(prv) != str(rec.rv):
                    raise conflict(rt.name, name)
                fn = merge_patch if ctype == MERGE else strategic_merge_patch
                new = fn(cur, patch)
            if not isinstance(new, dict):
                raise ApiError(422, "patch produced a non-object", "Invalid")
            return 200, self._commit(rt, ns, rec, new, sub, params, manager)

    def _apply(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        sub: str,
        raw: bytes,
        params: dict[str, str],
    ) -> tuple[int, bytes]:
        manager = params.get("fieldManager")
        if not manager:
            raise ApiError(
                422,
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is '
                "required for apply patch",
                "Invalid",
            )
        force = params.get("force", "").lower() in ("true", "1")
        applied = _load_apply_body(raw)
        if not applied.get("apiVersion") or not applied.get("kind"):
            raise ApiError(
                400, "invalid object type: apiVersion and kind must be set", "BadRequest"
            )
        self._check_kind(rt, applied)
        meta = applied.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != name:
            raise ApiError(400, "the name of the object does not match the name on the URL")
        meta["name"] = name
        if rt.namespaced:
            meta["namespace"] = ns
        with self.store.lock:
            rec = self.store.get(rt.name, ns if rt.namespaced else "", name)
            if rec is None:
                if sub:
                    raise not_found(rt.name, name)
                body = server_side_apply(None, applied, manager, force, rt.name, name)
                managed = body["metadata"].get("managedFields") or []
                return self.op_create(rt, ns, body, params, manager, managed)
            live = rec.obj()
            new = server_side_apply(live, applied, manager, force, rt.name, name)
            return 200, self._commit(rt, ns, rec, new, sub, params, manager, managed_done=True)

    # --------------------------------------------------------------- delete
    def op_delete(
        self, rt: ResourceType, ns: str, name: str, body: Any, params: dict[str, str]
    ) -> bytes:
        with self.store.lock:
            rec = self._existing(rt, ns, name)
            pre = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}
            if pre.get("uid") and pre["uid"] != rec.obj()["metadata"].get("uid"):
                raise ApiError(
                    409,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                    f"meta: {rec.obj()['metadata'].get('uid')}",
                    "Conflict",
                )
            if pre.get("resourceVersion") and str(pre["resourceVersion"]) != str(rec.rv):
                raise conflict(rt.name, name)
            if params.get("dryRun"):
                return rec.raw
            obj = self._delete(rt, ns, name)
        if rt.name in ("pods", "namespaces"):
            return _dumps(obj)
        return _dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": name,
                    "kind": rt.name,
                    "uid": obj["metadata"].get("uid"),
                },
            }
        )

    def _delete(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
        if rt.name == "namespaces":
            if name in SYSTEM_NAMESPACES:
                raise ApiError(
                    403,
                    f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                    "Forbidden",
                )
            for r in RESOURCES:
                if r.namespaced:
                    for child in list(self.store.in_namespace(r.name, name)):
                        self.store.remove(r.name, name, child.name)
            obj = self.store.remove("namespaces", "", name) or {}
            obj.setdefault("status", {})["phase"] = "Terminating"
            obj["metadata"]["deletionTimestamp"] = now_iso()
            return obj
        obj = self.store.remove(rt.name, ns if rt.namespaced else "", name)
        if obj is None:
            raise not_found(rt.name, name)
        self._after_write(rt, ns, obj, None)
        return obj

    def op_delete_collection(
        self, rt: ResourceType, ns: str | None, params: dict[str, str]
    ) -> bytes:
        lsel = parse_label_selector(params.get("labelSelector"))
        fsel = parse_field_selector(params.get("fieldSelector"), rt.fields)
        with self.store.lock:
            keys, lo, hi = self.store.key_range(rt.name, ns)
            objs = self.store.objects[rt.name]
            victims = []
            for k in keys[lo:hi]:
                rec = objs[k]
                if (lsel is None or lsel(rec.labels)) and (fsel is None or fsel(rec.fields)):
                    victims.append(rec)
            deleted = [self._delete(rt, v.namespace, v.name) for v in victims]
            rv = self.store.rv
        return _dumps(
            {
                "kind": rt.kind + "List",
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": deleted,
            }
        )

    # ------------------------------------------------------------- eviction
    def op_evict(self, ns: str, name: str, body: Any, params: dict[str, str]) -> tuple[int, bytes]:
        """policy/v1 Eviction: deletes the pod unless a PodDisruptionBudget forbids it (429)."""
        if isinstance(body, dict) and body.get("kind") not in (None, "Eviction"):
            raise ApiError(400, f"invalid Eviction body kind {body.get('kind')!r}")
        with self.store.lock:
            rec = self._existing(RT["pods"], ns, name)
            pod = rec.obj()
            if (pod.get("status") or {}).get("phase") == "Running":
                self._check_pdbs(ns, pod)
            if not params.get("dryRun"):
                self._delete(RT["pods"], ns, name)
        return 201, _dumps(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        )

    def _check_pdbs(self, ns: str, pod: dict[str, Any]) -> None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        for pdb_rec in self.store.in_namespace("poddisruptionbudgets", ns):
            pdb = pdb_rec.obj()
            spec = pdb.get("spec") or {}
            match = _label_selector_matcher(spec.get("selector") or {})
            if not match(labels):
                continue
            expected = healthy = 0
            for prec in self.store.in_namespace("pods", ns):
                if prec.info is not None and prec.info.terminal:
                    continue
                if match(prec.labels):
                    expected += 1
                    if prec.fields.get("status.phase") == "Running":
                        healthy += 1
            if "minAvailable" in spec:
                desired = _scaled(spec["minAvailable"], expected)
                allowed = healthy - desired
            elif "maxUnavailable" in spec:
                desired = expected - _scaled(spec["maxUnavailable"], expected)
                allowed = _scaled(spec["maxUnavailable"], expected) - (expected - healthy)
            else:
                continue
            if allowed < 1:
                pname = pdb["metadata"]["name"]
                raise ApiError(
                    429,
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    "TooManyRequests",
                    {
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {pname} needs {desired} "
                                f"healthy pods and has {healthy} currently",
                            }
                        ]
                    },
                )

    # ---------------------------------------------------------------- quota
    def _quota_status(
        self, quota_obj: dict[str, Any], ns: str, previous: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if self.faults.config.quota_controller_paused:
            # A stalled quota controller: spec changes, status stays as it was.
            return copy.deepcopy((previous or {}).get("status") or {})
        hard = dict((quota_obj.get("spec") or {}).get("hard") or {})
        infos = [r.info for r in self.store.in_namespace("pods", ns) if r.info is not None]
        counts: dict[str, int] = {}
        for key in hard:
            rt = _count_resource(key)
            if rt is not None and rt.name != "pods":
                counts[key] = self.store.count(rt.name, ns)
        used = q.sum_usage(quota_obj, infos, counts)
        return {"hard": hard, "used": used}

    def refresh_quotas(self, ns: str) -> None:
        """The quota controller: recompute ``status`` of every quota in ``ns`` now."""
        with self.store.lock:
            for rec in list(self.store.in_namespace("resourcequotas", ns)):
                obj = rec.obj()
                st = self._quota_status(obj, ns, previous=obj)
                if st != obj.get("status"):
                    obj["status"] = st
                    self.store.put("resourcequotas", obj, "MODIFIED")

    def _after_write(
        self, rt: ResourceType, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        counted = rt.name == "pods" or old is None or new is None
        if rt.namespaced and rt.name != "resourcequotas" and counted:
            self.refresh_quotas(ns)
        if rt.name == "nodes" and new is not None:
            self.mig.on_node_write(old, new)


# ------------------------------------------------------------------ helpers


def _int_param(params: dict[str, str], key: str) -> int:
    val = params.get(key)
    if not val:
        return 0
    try:
        n = int(val)
    except ValueError as exc:
        raise ApiError(400, f"invalid {key} parameter {val!r}", "BadRequest") from exc
    return max(0, n)


def _validate_name(rt: ResourceType, name: str) -> None:
    ok = (
        0 < len(name) <= (63 if rt.name == "namespaces" else 253)
        and set(name) <= _NAME_OK
        and name[0].isalnum()
        and name[-1].isalnum()
        and not (rt.name == "namespaces" and "." in name)
    )
    if not ok:
        raise invalid(
            rt.kind,
            name,
            "metadata.name",
            name,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character",
        )


def _validate_hard(obj: dict[str, Any]) -> dict[str, str]:
    hard = (obj.get("spec") or {}).get("hard") or {}
    out = {}
    name = (obj.get("metadata") or {}).get("name", "")
    for k, v in hard.items():
        try:
            qty = q.parse_quantity(v)
        except ValueError:
            raise invalid(
                "ResourceQuota",
                name,
                f"spec.hard[{k}]",
                v,
                "quantities must match the regular expression "
                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ) from None
        if qty.value < 0:
            raise invalid(
                "ResourceQuota", name, f"spec.hard[{k}]", v, "must be greater than or equal to 0"
            )
        out[k] = str(v) if isinstance(v, str) else str(qty)
    return out


def _prepare_pod(obj: dict[str, Any]) -> None:
    """Pod defaulting (requests from limits) and the resource validation the API server does."""
    spec = obj.setdefault("spec", {})
    name = obj["metadata"]["name"]
    containers = spec.get("containers") or []
    if not containers:
        raise ApiError(
            422,
            f'Pod "{name}" is invalid: spec.containers: Required value',
            "Invalid",
            {"name": name, "kind": "Pod"},
        )
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    for field_name in ("initContainers", "containers"):
        for idx, c in enumerate(spec.get(field_name) or []):
            res = c.setdefault("resources", {})
            lim = res.get("limits") or {}
            req = res.get("requests") or {}
            for k, v in lim.items():
                req.setdefault(k, v)
            for k, v in req.items():
                try:
                    rq = q.parse_quantity(v)
                except ValueError:
                    raise invalid(
                        "Pod",
                        name,
                        f"spec.{field_name}[{idx}].resources.requests[{k}]",
                        v,
                        "must be a valid quantity",
                    ) from None
                if q.is_native(k):
                    continue
                if k not in lim:
                    raise ApiError(
                        422,
                        f'Pod "{name}" is invalid: spec.{field_name}[{idx}].resources.limits: '
                        "Required value: Limit must be set for non overcommitable resources",
                        "Invalid",
                        {"name": name, "kind": "Pod"},
                    )
                if q.parse_quantity(lim[k]).value != rq.value:
                    raise ApiError(
                        422,
                        f'Pod "{name}" is invalid: spec.{field_name}[{idx}].resources.'
                        f'requests[{k}]: Invalid value: "{v}": must be equal to {k} limit of '
                        f"{lim[k]}",
                        "Invalid",
                        {"name": name, "kind": "Pod"},
                    )
            if req:
                res["requests"] = req


def _qos(spec: dict[str, Any]) -> str:
    cs = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in cs:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if r in req or r in lim:
                any_set = True
            if r not in lim or q.parse_quantity(lim[r]) != q.parse_quantity(req.get(r, lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _load_apply_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError:
        import yaml

        try:
            body = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ApiError(400, f"error decoding YAML: {exc}", "BadRequest") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "apply patch must be an object", "BadRequest")
    return body


def _label_selector_matcher(sel: dict[str, Any]) -> Any:
    ml = sel.get("matchLabels") or {}
    exprs = sel.get("matchExpressions") or []

    def match(labels: dict[str, str]) -> bool:
        for k, v in ml.items():
            if labels.get(k) != v:
                return False
        for e in exprs:
            k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
            if op == "In" and labels.get(k) not in vals:
                return False
            if op == "NotIn" and labels.get(k) in vals:
                return False
            if op == "Exists" and k not in labels:
                return False
            if op == "DoesNotExist" and k in labels:
                return False
        return True

    return match


def _scaled(val: Any, total: int) -> int:
    if isinstance(val, str) and val.endswith("%"):
        return math.ceil(int(val[:-1]) * total / 100)
    return int(val)


def _count_resource(key: str) -> ResourceType | None:
    if key.startswith("count/"):
        name, _, group = key[6:].partition(".")
        for r in RESOURCES:
            if r.name == name and r.group == group:
                return r
        return None
    legacy = q.LEGACY_COUNT.get(key)
    return RT.get(legacy) if legacy else None
