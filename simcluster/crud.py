"""Create, read, update, patch, apply and delete on the store, with admission."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from simcluster import (
    deletion,
    disruption,
    fielderrors,
    fieldvalidation,
    kueue,
    kueue_types,
    namespaces,
    serviceaccounts,
    validation,
    workloads,
)
from simcluster.errors import ApiError, already_exists, conflict, not_found
from simcluster.fleet import now_iso
from simcluster.patch import APPLY, JSONPATCH, MERGE, STRATEGIC, apply_patch
from simcluster.pods import initial_status, prepare_pod
from simcluster.resources import BY_PATH, CUSTOM_RESOURCE_GROUPS, ResourceType
from simcluster.ssa import force_forbidden, record_update, server_side_apply
from simcluster.store import Record


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _strip_volatile(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as storage compares it (etcd3 ``GuaranteedUpdate`` skips equal bytes).

    ``managedFields`` times count: an apply that structured-merge-diff sees as a change
    moves the applier's time (``managedfields_updater.go``) and is written even when the
    decoded object ends up equal (``1000m`` re-applied over a stored ``1``), in a new second.
    """
    o = copy.deepcopy(obj)
    meta = o.get("metadata") or {}
    meta.pop("resourceVersion", None)
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
        create_on_apply: bool = False,
    ) -> tuple[int, bytes]:
        # decode into the type: unknown fields dropped, fieldValidation (fieldvalidation.py)
        body = fieldvalidation.decode_body(rt, body, params, "CreateOptions")
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
            asked = meta.get("name") or meta.get("generateName") or "Unknown"  # admission's
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = validation.generate_name(str(meta["generateName"]))
            name = meta.get("name") or ""  # missing: validation answers 422 (name required)
            body.setdefault("apiVersion", rt.api_version)
            body.setdefault("kind", rt.kind)
            for k in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
                meta.pop(k, None)
            meta.pop("managedFields", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_iso()
            validation.normalize(rt, body)
            self._prepare_create(rt, body)
            owned = None  # the field manager records the object before mutating admission
            if rt.name == "pods":  # mutating admission, before validation (serviceaccounts.py)
                owned = copy.deepcopy(body)
                serviceaccounts.admit_pod(self, ns, body, str(asked))
            if rt.name in kueue.MUTATED:  # Kueue's mutating webhooks (kueue.py)
                owned = copy.deepcopy(body) if owned is None else owned
                kueue.mutate_create(self, rt, ns, body)
            validation.validate_create(rt, body)
            if create_on_apply:  # the PATCH was authorized; creating needs `create` (rbac.py)
                self.authz.check_create_on_apply(rt.group, rt.name, ns, name)
            self._admit_create(rt, ns, body, bool(params.get("dryRun")))
            if self.store.get(rt.name, ns if rt.namespaced else "", name) is not None:
                raise already_exists(
                    rt.name, name, rt.group
                )  # storage: after validation and admission
            if managed_fields is not None:
                meta["managedFields"] = managed_fields
            elif owned is not None:
                record_update(None, owned, manager)
                meta.pop("managedFields", None)
                if owned["metadata"].get("managedFields"):
                    meta["managedFields"] = owned["metadata"]["managedFields"]
            else:
                record_update(None, body, manager)
            if params.get("dryRun"):
                return 201, _dumps(body)
            rec = self.store.put(rt.name, body, "ADDED")
            self._after_write(rt, ns, None, body)
            if rt.name == "pods":  # its node's kubelet starts it (kubelet.py)
                self.kubelets.admit(ns, body)
            return 201, rec.raw

    def _check_kind(self, rt: ResourceType, body: dict[str, Any]) -> None:
        """The body's ``apiVersion``/``kind`` against the endpoint's, as the decoder words a
        mismatch: a built-in type converts only into itself (``converting (v1.Secret) to
        (core.ConfigMap): unknown conversion``; ``no kind "X" is registered for version
        "v2"``; staging/src/k8s.io/apimachinery/pkg/runtime/scheme.go, converter.go,
        apiserver handlers/create.go ``cannot be handled as``); a custom resource checks the
        version and takes the kind from the path (apiextensions-apiserver
        customresource_handler.go)."""
        kind = body.get("kind") or rt.kind
        api_version = body.get("apiVersion") or rt.api_version
        if (api_version, kind) == (rt.api_version, rt.kind):
            return
        if rt.group in CUSTOM_RESOURCE_GROUPS:
            if api_version != rt.api_version:
                raise ApiError(
                    400,
                    f"the API version in the data ({api_version}) does not match the expected "
                    f"API version ({rt.api_version})",
                    "BadRequest",
                )
            body["kind"] = rt.kind  # the unstructured decoder takes the endpoint's kind
            return
        version = api_version.rpartition("/")[2]
        known = any(r.api_version == api_version and r.kind == kind for r in BY_PATH.values())
        if known:
            internal = (rt.group.split(".")[0] if rt.group else "core") + "." + rt.kind
            why = f"converting ({version}.{kind}) to ({internal}): unknown conversion"
        else:
            why = (
                f'no kind "{kind}" is registered for version "{api_version}" in scheme '
                '"pkg/runtime/scheme.go:111"'
            )
        raise ApiError(
            400,
            f'{kind} in version "{version}" cannot be handled as a {rt.kind}: {why}',
            "BadRequest",
        )

    def _prepare_create(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt.name == "pods":
            prepare_pod(obj)
            obj["status"] = initial_status(obj)
        elif rt.name == "namespaces":
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj[
                "metadata"
            ]["name"]
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif rt.name == "resourcequotas":
            obj.setdefault("spec", {})
            obj["status"] = {}  # PrepareForCreate; the quota controller fills it later
        elif rt.name == "poddisruptionbudgets":
            disruption.prepare_create(obj)
        elif rt.name in workloads.WORKLOADS:  # apps, batch, networking (workloads.py)
            workloads.prepare_create(rt.name, obj)
        elif rt.name in kueue_types.RESOURCES:  # Kueue's CRDs (kueue_types.py)
            kueue_types.default(rt.name, obj)
            kueue_types.prepare_create(rt.name, obj)
        elif rt.name == "nodes":
            obj.setdefault("spec", {})
            obj.setdefault("status", {})

    def _admit_create(
        self, rt: ResourceType, ns: str, obj: dict[str, Any], dry_run: bool = False
    ) -> None:
        """NamespaceLifecycle, then ResourceQuota (which charges the quota unless dry run)."""
        namespaces.admit_create(self, rt, ns, obj)
        kueue.validate_admission(self, rt, None, obj)  # Kueue's validating webhooks
        self.admit_quota(rt, ns, obj, dry_run)

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
        body = fieldvalidation.decode_body(rt, body, params, "UpdateOptions")
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request must be a JSON object", "BadRequest")
        self._check_kind(rt, body)
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        # update.go, before the object is read: EnsureObjectNamespaceMatchesRequestNamespace,
        # then checkName (rest.go) -- an object without a name does not match either
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise ApiError(
                400,
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
                "BadRequest",
            )
        if str(meta.get("name") or "") != name:
            raise ApiError(
                400,
                f"the name of the object ({meta.get('name') or ''}) does not match the name on "
                f"the URL ({name})",
                "BadRequest",
            )
        with self.store.lock:
            rec = self._existing(rt, ns, name)
            rv = meta.get("resourceVersion")
            if rv and str(rv) != str(rec.rv):
                raise conflict(rt.name, name, rt.group)
            stored_uid = rec.obj()["metadata"].get("uid") or ""
            if meta.get("uid") and meta["uid"] != stored_uid:  # PUT's UID precondition
                raise validation.uid_precondition_failed(rt, ns, name, meta["uid"], stored_uid)
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
            if k == "namespace" and rt.namespaced and meta.get(k) and meta[k] != ometa.get(k):
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                    "BadRequest",
                )
            if k in ("name", "uid") and meta.get(k) and meta[k] != ometa.get(k):
                continue  # validation answers "field is immutable"
            if k in ometa:
                meta[k] = ometa[k]
            else:
                meta.pop(k, None)
        if sub == "status":
            merged = copy.deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            if managed_done:  # a status apply: keep the managedFields ssa.py computed
                merged["metadata"].pop("managedFields", None)
                if meta.get("managedFields"):
                    merged["metadata"]["managedFields"] = meta["managedFields"]
            new = merged
        elif rt.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds"):  # BeforeUpdate
            if ometa.get(k) is not None:
                meta[k] = ometa[k]
        validation.normalize(rt, new)  # decoded: canonical quantities
        if rt.name == "poddisruptionbudgets" and sub != "status":
            disruption.prepare_update(old, new)
        elif rt.name in workloads.WORKLOADS and sub != "status":
            workloads.prepare_update(rt.name, old, new)
        elif rt.name in kueue_types.RESOURCES:
            kueue_types.default(rt.name, new)
            if sub != "status":
                kueue_types.prepare_update(rt.name, old, new)
        if not managed_done:
            new["metadata"]["managedFields"] = ometa.get("managedFields") or []
            record_update(old, new, manager, sub)
        if rt.name in ("pods",) and "spec" in new and sub != "status":
            prepare_pod(new)
        validation.validate_update(rt, old, new, sub)  # before the no-op check, as BeforeUpdate
        if rt.name in kueue_types.RESOURCES:  # Kueue's validating webhooks (kueue.py)
            kueue.validate_admission(self, rt, old, new, sub)
        if _strip_volatile(new) == _strip_volatile(old):
            return rec.raw
        if params.get("dryRun"):
            return _dumps(new)
        if deletion.should_delete_during_update(old, new):  # last finalizer removed
            deletion.remove_now(self, rt, ns, rec.name)
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
        # the patch handler's first check (handlers/patch.go); a custom resource has no
        # strategic merge (apiextensions-apiserver customresource_handler.go)
        accepted = [JSONPATCH, MERGE, APPLY]
        if rt.group not in CUSTOM_RESOURCE_GROUPS:
            accepted.append(STRATEGIC)
        if ctype not in accepted:
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}",
                "UnsupportedMediaType",
            )
        if ctype == APPLY:
            return self._apply(rt, ns, name, sub, raw, params)
        if "force" in params:  # ValidatePatchOptions (apimachinery meta/v1/validation)
            raise force_forbidden()
        mode = fieldvalidation.directive(params, "PatchOptions")
        with self.store.lock:
            rec = self._existing(rt, ns, name)
            cur = rec.obj()
            # patch.py: apply, then decode the result into the type (fieldValidation)
            new = apply_patch(rt, cur, raw, ctype, mode)
            prv = (new.get("metadata") or {}).get("resourceVersion")
            if prv and str(prv) != str(rec.rv):
                raise conflict(rt.name, name, rt.group)
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
        if not manager:  # ValidatePatchOptions (apimachinery/pkg/apis/meta/v1/validation)
            raise fielderrors.invalid_error(
                "PatchOptions",
                "meta.k8s.io",
                "",
                [fielderrors.required("fieldManager", "is required for apply patch")],
            )
        force = params.get("force", "").lower() in ("true", "1")
        applied = _load_apply_body(raw)
        if not applied.get("apiVersion") or not applied.get("kind"):
            raise ApiError(
                400, "invalid object type: apiVersion and kind must be set", "BadRequest"
            )
        if (applied["apiVersion"], applied["kind"]) != (rt.api_version, rt.kind):
            # the field manager's versionCheckManager (managedfields/internal/versioncheck.go)
            group, _, version = str(applied["apiVersion"]).rpartition("/")
            raise ApiError(
                400, f"invalid object type: {group}/{version}, Kind={applied['kind']}", "BadRequest"
            )
        fieldvalidation.directive(params, "PatchOptions")
        fieldvalidation.check_apply(rt, applied)  # undeclared fields -> 500, as smd does
        meta = applied.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != name:  # handlers/rest.go checkName
            raise ApiError(
                400,
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})",
                "BadRequest",
            )
        meta["name"] = name
        if rt.namespaced:
            meta["namespace"] = ns
        with self.store.lock:
            rec = self.store.get(rt.name, ns if rt.namespaced else "", name)
            if rec is None:
                if sub:
                    raise not_found(rt.name, name, rt.group)
                body = server_side_apply(None, applied, manager, force, rt.name, name)
                fieldvalidation.apply_strict(raw, params)  # duplicate YAML keys
                managed = body["metadata"].get("managedFields") or []
                return self.op_create(rt, ns, body, params, manager, managed, True)
            live = rec.obj()
            new = server_side_apply(live, applied, manager, force, rt.name, name, sub)
            fieldvalidation.apply_strict(raw, params)
            return 200, self._commit(rt, ns, rec, new, sub, params, manager, managed_done=True)

    # --------------------------------------------------------------- delete
    def op_delete(
        self, rt: ResourceType, ns: str, name: str, body: Any, params: dict[str, str]
    ) -> bytes:
        """DELETE one object: graceful for pods, finalizers kept (:mod:`simcluster.deletion`)."""
        opts = deletion.parse_options(body, params)
        with self.store.lock:
            return _dumps(deletion.delete_object(self, rt, ns, name, opts))

    def _delete(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
        """Remove an object from storage now (no grace period, finalizers ignored)."""
        return deletion.remove_now(self, rt, ns, name)

    def op_delete_collection(
        self, rt: ResourceType, ns: str | None, params: dict[str, str], body: Any = None
    ) -> bytes:
        """DELETE a collection: every selected object deleted as by a single DELETE."""
        with self.store.lock:
            items = deletion.delete_collection(self, rt, ns, params, body)
            rv = self.store.rv
        return _dumps(
            {
                "kind": rt.kind + "List",
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            }
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
