"""Create, read, update, patch, apply and delete on the store, with admission."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from simcluster import quota as q
from simcluster import validation
from simcluster.errors import ApiError, already_exists, conflict, invalid, not_found
from simcluster.fleet import now_iso
from simcluster.patch import (
    APPLY,
    JSONPATCH,
    MERGE,
    STRATEGIC,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from simcluster.pods import prepare_pod, qos
from simcluster.quotactl import validate_hard
from simcluster.resources import RESOURCES, SYSTEM_NAMESPACES, ResourceType
from simcluster.selectors import parse_field_selector, parse_label_selector
from simcluster.ssa import record_update, server_side_apply
from simcluster.store import Record

_NAME_OK = set("abcdefghijklmnopqrstuvwxyz0123456789-.")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _strip_volatile(obj: dict[str, Any]) -> dict[str, Any]:
    o = copy.deepcopy(obj)
    meta = o.get("metadata") or {}
    meta.pop("resourceVersion", None)
    for m in meta.get("managedFields") or []:
        m.pop("time", None)
    return o


class CrudOps:
    """Object writes of :class:`~simcluster.cluster.SimCluster` (a mixin)."""

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
            validation.validate_create(rt, body)
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
            prepare_pod(obj)
            spec = obj["spec"]
            node = spec.get("nodeName")
            status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
            status["qosClass"] = qos(spec)
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
            obj["spec"]["hard"] = validate_hard(obj)
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
            new["spec"]["hard"] = validate_hard(new)
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
            prepare_pod(new)
        validation.validate_update(rt, old, new, sub)
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
