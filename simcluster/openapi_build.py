"""The OpenAPI document builder of :mod:`simcluster.openapi`: schemas and paths.

Schemas render :mod:`simcluster.schema` definitions the way kube-openapi's generator does
(v3: properties referencing definitions as ``allOf: [{$ref}]`` with ``default: {}``; v2: a
plain ``$ref``; ``x-kubernetes-patch-strategy`` / ``-patch-merge-key`` / ``-list-type`` /
``-list-map-keys`` / ``-map-type`` on the fields). Paths and operations follow the API
server's installer (k8s.io/apiserver ``pkg/endpoints/installer.go``): operation ids such as
``patchCoreV1NamespacedPod``, ``x-kubernetes-action``, ``x-kubernetes-group-version-kind``,
and the query parameters each verb accepts (``dryRun``, ``fieldManager``,
``fieldValidation`` on POST/PUT/PATCH, ``force`` on PATCH).
"""

from __future__ import annotations

from typing import Any

from simcluster import schema
from simcluster.resources import CUSTOM_RESOURCE_GROUPS, ResourceType
from simcluster.schema import Definition, Field, Type

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_SPECIAL: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # scalar -> (definition name, v3 schema, v2 schema); descriptions written for simcluster
    "quantity": (
        "io.k8s.apimachinery.pkg.api.resource.Quantity",
        {"oneOf": [{"type": "string"}, {"type": "number"}]},
        {"type": "string"},
    ),
    "intstr": (
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
        {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
        {"format": "int-or-string", "type": "string"},
    ),
    "time": (f"{META}.Time", {"format": "date-time", "type": "string"}, {}),
    "microtime": (f"{META}.MicroTime", {"format": "date-time", "type": "string"}, {}),
    "fieldsv1": (f"{META}.FieldsV1", {"type": "object"}, {}),
    "rawext": ("io.k8s.apimachinery.pkg.runtime.RawExtension", {"type": "object"}, {}),
}
_SPECIAL_DESC = {
    "quantity": "Quantity is a fixed-point number: a decimal or binary-SI amount such as "
    "500m, 1.5Gi or 4.",
    "intstr": "IntOrString holds either an int32 or a string.",
    "time": "Time is an RFC 3339 date and time at second precision.",
    "microtime": "MicroTime is an RFC 3339 date and time with microseconds.",
    "fieldsv1": "FieldsV1 stores a set of fields (managedFields) as a JSON trie.",
    "rawext": "RawExtension holds an embedded object of any kind.",
}
_SCALAR = {
    "string": {"type": "string"},
    "boolean": {"type": "boolean"},
    "int32": {"type": "integer", "format": "int32"},
    "int64": {"type": "integer", "format": "int64"},
    "number": {"type": "number", "format": "double"},
    "byte": {"type": "string", "format": "byte"},
    "object": {"type": "object"},
}
_PATCH_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)
_Q = {
    "dryRun": "When present, indicates that modifications should not be persisted. Valid "
    "value: All.",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is "
    "making these changes.",
    "fieldValidation": "fieldValidation instructs the server on how to handle objects in the "
    "request containing unknown or duplicate fields: Ignore, Warn (the default) or Strict.",
    "force": "Force is going to force Apply requests (re-acquire conflicting fields).",
    "allowWatchBookmarks": "allowWatchBookmarks requests watch events with type BOOKMARK.",
    "continue": "The continue option should be set when retrieving more results.",
    "fieldSelector": "A selector to restrict the list of returned objects by their fields.",
    "labelSelector": "A selector to restrict the list of returned objects by their labels.",
    "limit": "limit is a maximum number of responses to return for a list call.",
    "resourceVersion": "resourceVersion sets a constraint on what resource versions a "
    "request may be served from.",
    "resourceVersionMatch": "resourceVersionMatch determines how resourceVersion is applied.",
    "sendInitialEvents": "sendInitialEvents=true may be set together with watch=true.",
    "timeoutSeconds": "Timeout for the list/watch call.",
    "watch": "Watch for changes to the described resources.",
    "gracePeriodSeconds": "The duration in seconds before the object should be deleted.",
    "orphanDependents": "Deprecated: please use the PropagationPolicy.",
    "propagationPolicy": "Whether and how garbage collection will be performed.",
    "ignoreStoreReadErrorWithClusterBreakingPotential": "if set to true, it will trigger an "
    "unsafe deletion of the resource in case the normal deletion flow fails.",
    "pretty": "If 'true', then the output is pretty printed.",
    "name": "name of the object",
    "namespace": "object name and auth scope, such as for teams and projects",
}
_Q_TYPE = {
    "allowWatchBookmarks": "boolean",
    "force": "boolean",
    "orphanDependents": "boolean",
    "sendInitialEvents": "boolean",
    "watch": "boolean",
    "ignoreStoreReadErrorWithClusterBreakingPotential": "boolean",
    "limit": "integer",
    "timeoutSeconds": "integer",
    "gracePeriodSeconds": "integer",
}
_LIST_Q = (
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
)
_WRITE_Q = ("dryRun", "fieldManager", "fieldValidation")
_DELETE_Q = (
    "dryRun",
    "gracePeriodSeconds",
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    "orphanDependents",
    "propagationPolicy",
)


def _camel_group(group: str) -> str:
    if not group:
        return "Core"
    parts = group.removesuffix(".k8s.io").split(".")
    return "".join(p[:1].upper() + p[1:] for p in parts)


def gvk(rt: ResourceType, kind: str | None = None) -> dict[str, str]:
    return {"group": rt.group, "kind": kind or rt.kind, "version": rt.version}


class Builder:
    """Definitions and paths of one document (v3 per group-version, or the v2 whole)."""

    def __init__(self, v3: bool) -> None:
        self.v3 = v3
        self.schemas: dict[str, Any] = {}
        self.todo: list[str] = []

    def ref(self, name: str) -> dict[str, Any]:
        if name not in self.schemas and name not in self.todo:
            self.todo.append(name)
        prefix = "#/components/schemas/" if self.v3 else "#/definitions/"
        return {"$ref": prefix + name}

    def typed(self, t: Type, top: bool) -> dict[str, Any]:
        """Schema of a type; ``top`` when it carries the field's description."""
        if t.kind == "list":
            return {"items": self.typed(t.item, False), "type": "array"}  # type: ignore[arg-type]
        if t.kind == "map":
            return {"additionalProperties": self.typed(t.item, False), "type": "object"}  # type: ignore[arg-type]
        if t.kind == "ref" or t.name in _SPECIAL:
            name = t.name if t.kind == "ref" else _SPECIAL[t.name][0]
            r = self.ref(name)
            if not self.v3:
                return r
            out: dict[str, Any] = {"allOf": [r]}
            if t.kind == "ref":
                out["default"] = {}
            return out
        return dict(_SCALAR.get(t.name, {"type": "object"}))

    def field(self, d: Definition, f: Field) -> dict[str, Any]:
        out = self.typed(f.type, True)
        desc = d.description(f.attr)
        if desc:
            out["description"] = desc
        if f.list_keys:
            out["x-kubernetes-list-map-keys"] = list(f.list_keys)
        if f.list_type:
            out["x-kubernetes-list-type"] = f.list_type
        if f.map_type:
            out["x-kubernetes-map-type"] = f.map_type
        if f.merge_key:
            out["x-kubernetes-patch-merge-key"] = f.merge_key
        if f.patch_strategy:
            out["x-kubernetes-patch-strategy"] = ",".join(f.patch_strategy)
        return dict(sorted(out.items()))

    def definition(self, name: str) -> dict[str, Any]:
        for scalar, (dname, s3, s2) in _SPECIAL.items():
            if dname == name:
                body = dict(s3 if self.v3 else (s2 or s3))
                body["description"] = _SPECIAL_DESC[scalar]
                return dict(sorted(body.items()))
        if name == f"{META}.Patch":
            return {
                "description": "Patch is the body of a PATCH request.",
                "type": "object",
            }
        d = schema.definition(name)
        out: dict[str, Any] = {}
        desc = d.description()
        if desc:
            out["description"] = desc
        out["properties"] = {k: self.field(d, f) for k, f in sorted(d.fields.items())}
        required = [k for k, f in d.fields.items() if f.required]
        if required:
            out["required"] = required
        out["type"] = "object"
        if d.atomic:
            out["x-kubernetes-map-type"] = "atomic"
        return out

    def finish(self, gvks: dict[str, list[dict[str, str]]]) -> dict[str, Any]:
        while self.todo:
            name = self.todo.pop(0)
            if name in self.schemas:
                continue
            try:
                self.schemas[name] = self.definition(name)
            except KeyError:
                self.schemas[name] = {"type": "object"}
        for name, kinds in gvks.items():
            if name in self.schemas:
                self.schemas[name]["x-kubernetes-group-version-kind"] = kinds
        return dict(sorted(self.schemas.items()))

    # -------------------------------------------------------------- paths
    def param(self, name: str, where: str = "query") -> dict[str, Any]:
        typ = _Q_TYPE.get(name, "string")
        out: dict[str, Any] = {"description": _Q.get(name, name), "in": where, "name": name}
        if where == "path":
            out["required"] = True
        if self.v3:
            s: dict[str, Any] = {"type": typ}
            if name == "dryRun":
                s["uniqueItems"] = True
            out["schema"] = s
        else:
            out["type"] = typ
            if name == "dryRun":
                out["uniqueItems"] = True
        return out

    def body(self, schema_ref: dict[str, Any], types: tuple[str, ...]) -> dict[str, Any]:
        if self.v3:
            return {"content": {t: {"schema": schema_ref} for t in types}, "required": True}
        return {"in": "body", "name": "body", "required": True, "schema": schema_ref}

    def responses(self, codes: tuple[str, ...], ref: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for c in codes:
            text = {"200": "OK", "201": "Created", "202": "Accepted"}[c]
            entry: dict[str, Any] = {"description": text}
            if ref is not None:
                if self.v3:
                    entry["content"] = {"application/json": {"schema": ref}}
                else:
                    entry["schema"] = ref
            out[c] = entry
        out["401"] = {"description": "Unauthorized"}
        return out

    def op(
        self,
        rt: ResourceType,
        action: str,
        op_id: str,
        desc: str,
        params: tuple[str, ...],
        codes: tuple[str, ...],
        resp: dict[str, Any] | None,
        body: tuple[dict[str, Any], tuple[str, ...]] | None = None,
        kind: str | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        tag = (_camel_group(rt.group)[:1].lower() + _camel_group(rt.group)[1:]) + "_v1"
        out: dict[str, Any] = {"description": desc, "operationId": op_id}
        ps = [self.param(p) for p in params]
        if body is not None and not self.v3:
            ps.insert(0, self.body(*body))
        if ps:
            out["parameters"] = ps
        if body is not None and self.v3:
            out["requestBody"] = self.body(*body)
        if not self.v3:
            if body is not None:
                out["consumes"] = list(body[1])
            out["produces"] = ["application/json"]
            out["schemes"] = ["https"]
        out["responses"] = self.responses(codes, resp)
        out["tags"] = [tag]
        out["x-kubernetes-action"] = action
        kinds = gvk(rt, kind)
        if group is not None:
            kinds["group"] = group
        out["x-kubernetes-group-version-kind"] = kinds
        return out

    def resource_paths(self, rt: ResourceType) -> dict[str, Any]:
        prefix = f"/api/{rt.version}" if not rt.group else f"/apis/{rt.group}/{rt.version}"
        scope = "Namespaced" if rt.namespaced else ""
        ns_part = "/namespaces/{namespace}" if rt.namespaced else ""
        g = _camel_group(rt.group) + "V1"
        k = rt.kind
        obj = self.ref(schema.for_kind(rt.group, rt.version, k).name)  # type: ignore[union-attr]
        lst_def = schema.for_kind(rt.group, rt.version, k + "List")
        lst = self.ref(lst_def.name) if lst_def is not None else None
        status = self.ref(f"{META}.Status")
        delete_opts = (self.ref(f"{META}.DeleteOptions"), ("*/*",))
        # a custom resource takes no strategic merge patch (the real CRD documents list
        # json-patch, merge-patch and apply-patch only), so kubectl apply merges instead
        patch_types = _PATCH_TYPES
        if rt.group in CUSTOM_RESOURCE_GROUPS:
            patch_types = tuple(t for t in _PATCH_TYPES if "strategic" not in t)
        patch_body = (self.ref(f"{META}.Patch"), patch_types)
        verbs = set(rt.verbs)
        paths: dict[str, Any] = {}
        path_params = [self.param("namespace", "path")] if rt.namespaced else []
        coll: dict[str, Any] = {}
        if "list" in verbs:
            coll["get"] = self.op(
                rt,
                "list",
                f"list{g}{scope}{k}",
                f"list or watch objects of kind {k}",
                _LIST_Q,
                ("200",),
                lst,
            )
        if "create" in verbs:
            coll["post"] = self.op(
                rt,
                "post",
                f"create{g}{scope}{k}",
                f"create a {k}",
                _WRITE_Q,
                ("200", "201", "202"),
                obj,
                (obj, ("*/*",)),
            )
        if "deletecollection" in verbs:
            coll["delete"] = self.op(
                rt,
                "deletecollection",
                f"delete{g}Collection{scope}{k}",
                f"delete collection of {k}",
                _DELETE_Q + _LIST_Q[1:-1],
                ("200",),
                status,
                delete_opts,
            )
        if coll:
            coll["parameters"] = [*path_params, self.param("pretty")]
            paths[f"{prefix}{ns_part}/{rt.name}"] = coll
        item: dict[str, Any] = {}
        if "get" in verbs:
            item["get"] = self.op(
                rt, "get", f"read{g}{scope}{k}", f"read the specified {k}", (), ("200",), obj
            )
        if "update" in verbs:
            item["put"] = self.op(
                rt,
                "put",
                f"replace{g}{scope}{k}",
                f"replace the specified {k}",
                _WRITE_Q,
                ("200", "201"),
                obj,
                (obj, ("*/*",)),
            )
        if "patch" in verbs:
            item["patch"] = self.op(
                rt,
                "patch",
                f"patch{g}{scope}{k}",
                f"partially update the specified {k}",
                (*_WRITE_Q, "force"),
                ("200", "201"),
                obj,
                patch_body,
            )
        if "delete" in verbs:
            item["delete"] = self.op(
                rt,
                "delete",
                f"delete{g}{scope}{k}",
                f"delete a {k}",
                _DELETE_Q,
                ("200", "202"),
                status,
                delete_opts,
            )
        if item:
            item["parameters"] = [self.param("name", "path"), *path_params, self.param("pretty")]
            paths[f"{prefix}{ns_part}/{rt.name}/{{name}}"] = item
        if rt.namespaced and "list" in verbs:
            paths[f"{prefix}/{rt.name}"] = {
                "get": self.op(
                    rt,
                    "list",
                    f"list{g}{k}ForAllNamespaces",
                    f"list or watch objects of kind {k}",
                    _LIST_Q,
                    ("200",),
                    lst,
                ),
                "parameters": [self.param("pretty")],
            }
        for sub in rt.subresources:
            base = f"{prefix}{ns_part}/{rt.name}/{{name}}/{sub}"
            params = [self.param("name", "path"), *path_params, self.param("pretty")]
            if sub == "status":
                paths[base] = {
                    "get": self.op(
                        rt,
                        "get",
                        f"read{g}{scope}{k}Status",
                        f"read status of the specified {k}",
                        (),
                        ("200",),
                        obj,
                    ),
                    "put": self.op(
                        rt,
                        "put",
                        f"replace{g}{scope}{k}Status",
                        f"replace status of the specified {k}",
                        _WRITE_Q,
                        ("200", "201"),
                        obj,
                        (obj, ("*/*",)),
                    ),
                    "patch": self.op(
                        rt,
                        "patch",
                        f"patch{g}{scope}{k}Status",
                        f"partially update status of the specified {k}",
                        (*_WRITE_Q, "force"),
                        ("200", "201"),
                        obj,
                        patch_body,
                    ),
                    "parameters": params,
                }
            elif sub in ("eviction", "token"):
                kind, group = (
                    ("Eviction", "policy")
                    if sub == "eviction"
                    else ("TokenRequest", "authentication.k8s.io")
                )
                sub_def = schema.for_kind(group, "v1", kind)
                if sub_def is None:
                    continue
                ref = self.ref(sub_def.name)
                paths[base] = {
                    "post": self.op(
                        rt,
                        "post",
                        f"create{g}{scope}{k}{kind}",
                        f"create {kind.lower()} of a {k}",
                        _WRITE_Q,
                        ("200", "201", "202"),
                        ref,
                        (ref, ("*/*",)),
                        kind,
                        group,
                    ),
                    "parameters": params,
                }
        return paths
