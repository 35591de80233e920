"""Decoding of ``application/vnd.kubernetes.protobuf`` request bodies into JSON-shaped dicts.

kubectl's imperative commands (``create namespace|configmap|quota|secret|serviceaccount|
role|rolebinding|clusterrole|clusterrolebinding``, ``create token``, ``auth can-i``,
``auth whoami``) POST protobuf. The body is the Kubernetes envelope: the magic ``k8s\\x00``
then a ``runtime.Unknown`` (``typeMeta`` = 1, ``raw`` = 2, ``contentEncoding`` = 3,
``contentType`` = 4; ``staging/src/k8s.io/apimachinery/pkg/runtime/serializer/protobuf/
protobuf.go`` and ``runtime/generated.proto``) whose ``raw`` is the object's message.

The messages are decoded with the field numbers of ``k8s.io/api/*/v1/generated.proto`` and
``apimachinery/pkg/apis/meta/v1/generated.proto`` into the dict the same object would give
as JSON (``encoding/json`` with the Go types' tags): zero-valued ``omitempty`` scalars are
dropped (gogo writes every non-pointer field), fields without ``omitempty`` get their zero
value, pointer fields keep a present zero, non-pointer structs are always there and a zero
``metav1.Time`` is ``null``. The result is then handled exactly like a JSON body. Other
types keep the 415 (:func:`decode` returns ``None``).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from simcluster.errors import ApiError

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"

# field: (number, json name, type, flags); flags: r = repeated, p = pointer, k = no omitempty
Field = tuple[int, str, str, str]
_META = (1, "metadata", "ObjectMeta", "")

SCHEMAS: dict[str, tuple[Field, ...]] = {
    # ---- k8s.io/apimachinery/pkg/apis/meta/v1
    "ObjectMeta": (
        (1, "name", "string", ""),
        (2, "generateName", "string", ""),
        (3, "namespace", "string", ""),
        (4, "selfLink", "string", ""),
        (5, "uid", "string", ""),
        (6, "resourceVersion", "string", ""),
        (7, "generation", "int64", ""),
        (8, "creationTimestamp", "time", ""),
        (9, "deletionTimestamp", "time", "p"),
        (10, "deletionGracePeriodSeconds", "int64", "p"),
        (11, "labels", "map:string", ""),
        (12, "annotations", "map:string", ""),
        (13, "ownerReferences", "OwnerReference", "r"),
        (14, "finalizers", "string", "r"),
        (17, "managedFields", "ManagedFieldsEntry", "r"),
    ),
    "OwnerReference": (
        (5, "apiVersion", "string", "k"),
        (1, "kind", "string", "k"),
        (3, "name", "string", "k"),
        (4, "uid", "string", "k"),
        (6, "controller", "bool", "p"),
        (7, "blockOwnerDeletion", "bool", "p"),
    ),
    "ManagedFieldsEntry": (
        (1, "manager", "string", ""),
        (2, "operation", "string", ""),
        (3, "apiVersion", "string", ""),
        (4, "time", "time", "p"),
        (6, "fieldsType", "string", ""),
        (7, "fieldsV1", "fieldsv1", "p"),
        (8, "subresource", "string", ""),
    ),
    "LabelSelector": (
        (1, "matchLabels", "map:string", ""),
        (2, "matchExpressions", "LabelSelectorRequirement", "r"),
    ),
    "LabelSelectorRequirement": (
        (1, "key", "string", "k"),
        (2, "operator", "string", "k"),
        (3, "values", "string", "r"),
    ),
    "FieldSelectorRequirement": (
        (1, "key", "string", "k"),
        (2, "operator", "string", "k"),
        (3, "values", "string", "r"),
    ),
    # ---- k8s.io/api/core/v1
    "Namespace": (_META, (2, "spec", "NamespaceSpec", ""), (3, "status", "NamespaceStatus", "")),
    "NamespaceSpec": ((1, "finalizers", "string", "r"),),
    "NamespaceStatus": (
        (1, "phase", "string", ""),
        (2, "conditions", "NamespaceCondition", "r"),
    ),
    "NamespaceCondition": (
        (1, "type", "string", "k"),
        (2, "status", "string", "k"),
        (4, "lastTransitionTime", "time", ""),
        (5, "reason", "string", ""),
        (6, "message", "string", ""),
    ),
    "ConfigMap": (
        _META,
        (4, "immutable", "bool", "p"),
        (2, "data", "map:string", ""),
        (3, "binaryData", "map:bytes", ""),
    ),
    "Secret": (
        _META,
        (5, "immutable", "bool", "p"),
        (2, "data", "map:bytes", ""),
        (4, "stringData", "map:string", ""),
        (3, "type", "string", ""),
    ),
    "ServiceAccount": (
        _META,
        (2, "secrets", "ObjectReference", "r"),
        (3, "imagePullSecrets", "LocalObjectReference", "r"),
        (4, "automountServiceAccountToken", "bool", "p"),
    ),
    "ObjectReference": (
        (1, "kind", "string", ""),
        (2, "namespace", "string", ""),
        (3, "name", "string", ""),
        (4, "uid", "string", ""),
        (5, "apiVersion", "string", ""),
        (6, "resourceVersion", "string", ""),
        (7, "fieldPath", "string", ""),
    ),
    "LocalObjectReference": ((1, "name", "string", ""),),
    "ResourceQuota": (
        _META,
        (2, "spec", "ResourceQuotaSpec", ""),
        (3, "status", "ResourceQuotaStatus", ""),
    ),
    "ResourceQuotaSpec": (
        (1, "hard", "map:quantity", ""),
        (2, "scopes", "string", "r"),
        (3, "scopeSelector", "ScopeSelector", "p"),
    ),
    "ScopeSelector": ((1, "matchExpressions", "ScopedResourceSelectorRequirement", "r"),),
    "ScopedResourceSelectorRequirement": (
        (1, "scopeName", "string", "k"),
        (2, "operator", "string", "k"),
        (3, "values", "string", "r"),
    ),
    "ResourceQuotaStatus": (
        (1, "hard", "map:quantity", ""),
        (2, "used", "map:quantity", ""),
    ),
    # ---- k8s.io/api/rbac/v1
    "Role": (_META, (2, "rules", "PolicyRule", "rk")),
    "ClusterRole": (
        _META,
        (2, "rules", "PolicyRule", "rk"),
        (3, "aggregationRule", "AggregationRule", "p"),
    ),
    "AggregationRule": ((1, "clusterRoleSelectors", "LabelSelector", "r"),),
    "PolicyRule": (
        (1, "verbs", "string", "rk"),
        (2, "apiGroups", "string", "r"),
        (3, "resources", "string", "r"),
        (4, "resourceNames", "string", "r"),
        (5, "nonResourceURLs", "string", "r"),
    ),
    "RoleBinding": (_META, (2, "subjects", "Subject", "r"), (3, "roleRef", "RoleRef", "")),
    "ClusterRoleBinding": (
        _META,
        (2, "subjects", "Subject", "r"),
        (3, "roleRef", "RoleRef", ""),
    ),
    "Subject": (
        (1, "kind", "string", "k"),
        (2, "apiGroup", "string", ""),
        (3, "name", "string", "k"),
        (4, "namespace", "string", ""),
    ),
    "RoleRef": (
        (1, "apiGroup", "string", "k"),
        (2, "kind", "string", "k"),
        (3, "name", "string", "k"),
    ),
    # ---- k8s.io/api/authentication/v1
    "TokenRequest": (
        _META,
        (2, "spec", "TokenRequestSpec", ""),
        (3, "status", "TokenRequestStatus", ""),
    ),
    "TokenRequestSpec": (
        (1, "audiences", "string", "rk"),
        (4, "expirationSeconds", "int64", "pk"),
        (3, "boundObjectRef", "BoundObjectReference", "pk"),
    ),
    "TokenRequestStatus": (
        (1, "token", "string", "k"),
        (2, "expirationTimestamp", "time", ""),
    ),
    "BoundObjectReference": (
        (1, "kind", "string", ""),
        (2, "apiVersion", "string", ""),
        (3, "name", "string", ""),
        (4, "uid", "string", ""),
    ),
    "SelfSubjectReview": (_META, (2, "status", "SelfSubjectReviewStatus", "")),
    "SelfSubjectReviewStatus": ((1, "userInfo", "UserInfo", ""),),
    "UserInfo": (
        (1, "username", "string", ""),
        (2, "uid", "string", ""),
        (3, "groups", "string", "r"),
        (4, "extra", "map:extra", ""),
    ),
    # ---- k8s.io/api/authorization/v1
    "SelfSubjectAccessReview": (
        _META,
        (2, "spec", "SelfSubjectAccessReviewSpec", ""),
        (3, "status", "SubjectAccessReviewStatus", ""),
    ),
    "SelfSubjectAccessReviewSpec": (
        (1, "resourceAttributes", "ResourceAttributes", "p"),
        (2, "nonResourceAttributes", "NonResourceAttributes", "p"),
    ),
    "ResourceAttributes": (
        (1, "namespace", "string", ""),
        (2, "verb", "string", ""),
        (3, "group", "string", ""),
        (4, "version", "string", ""),
        (5, "resource", "string", ""),
        (6, "subresource", "string", ""),
        (7, "name", "string", ""),
        (8, "fieldSelector", "FieldSelectorAttributes", "p"),
        (9, "labelSelector", "LabelSelectorAttributes", "p"),
    ),
    "FieldSelectorAttributes": (
        (1, "rawSelector", "string", ""),
        (2, "requirements", "FieldSelectorRequirement", "r"),
    ),
    "LabelSelectorAttributes": (
        (1, "rawSelector", "string", ""),
        (2, "requirements", "LabelSelectorRequirement", "r"),
    ),
    "NonResourceAttributes": ((1, "path", "string", ""), (2, "verb", "string", "")),
    "SubjectAccessReviewStatus": (
        (1, "allowed", "bool", "k"),
        (4, "denied", "bool", ""),
        (2, "reason", "string", ""),
        (3, "evaluationError", "string", ""),
    ),
    "SelfSubjectRulesReview": (
        _META,
        (2, "spec", "SelfSubjectRulesReviewSpec", ""),
        (3, "status", "SubjectRulesReviewStatus", ""),
    ),
    "SelfSubjectRulesReviewSpec": ((1, "namespace", "string", ""),),
    "SubjectRulesReviewStatus": (
        (1, "resourceRules", "ResourceRule", "rk"),
        (2, "nonResourceRules", "NonResourceRule", "rk"),
        (3, "incomplete", "bool", "k"),
        (4, "evaluationError", "string", ""),
    ),
    "ResourceRule": (
        (1, "verbs", "string", "rk"),
        (2, "apiGroups", "string", "r"),
        (3, "resources", "string", "r"),
        (4, "resourceNames", "string", "r"),
    ),
    "NonResourceRule": ((1, "verbs", "string", "rk"), (2, "nonResourceURLs", "string", "r")),
}

# (apiVersion, kind) of the envelope -> message
TOP_LEVEL: dict[tuple[str, str], str] = {
    **{("v1", k): k for k in ("Namespace", "ConfigMap", "ResourceQuota", "ServiceAccount")},
    ("v1", "Secret"): "Secret",
    **{
        ("rbac.authorization.k8s.io/v1", k): k
        for k in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    },
    ("authentication.k8s.io/v1", "TokenRequest"): "TokenRequest",
    ("authentication.k8s.io/v1", "SelfSubjectReview"): "SelfSubjectReview",
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "SelfSubjectAccessReview",
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): "SelfSubjectRulesReview",
}

_SCALAR_ZERO: dict[str, Any] = {"string": "", "int64": 0, "int32": 0, "bool": False}


class _Malformed(Exception):
    pass


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data) or shift > 63:
            raise _Malformed("truncated varint")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message; value is int or bytes."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _varint(data, i)
        elif wt == 2:
            n, i = _varint(data, i)
            if i + n > len(data):
                raise _Malformed("truncated length-delimited field")
            val, i = data[i : i + n], i + n
        elif wt == 1:
            val, i = int.from_bytes(data[i : i + 8], "little"), i + 8
        elif wt == 5:
            val, i = int.from_bytes(data[i : i + 4], "little"), i + 4
        else:
            raise _Malformed(f"unsupported wire type {wt}")
        out.append((num, wt, val))
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _text(v: Any) -> str:
    if not isinstance(v, bytes):
        raise _Malformed("expected a length-delimited string")
    return v.decode("utf-8")


def _time(v: bytes) -> str | None:
    seconds = 0
    for num, _, val in _fields(v):
        if num == 1:
            seconds = _signed(val)
    if not v:
        return None  # metav1.Time{} (the zero time) marshals as JSON null
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _map_entry(v: bytes) -> tuple[str, Any]:
    key, value = "", b""
    for num, _, val in _fields(v):
        if num == 1:
            key = _text(val)
        elif num == 2:
            value = val
    return key, value


def _value(typ: str, val: Any) -> Any:
    if typ == "string":
        return _text(val)
    if typ in ("int64", "int32"):
        return _signed(val)
    if typ == "bool":
        return bool(val)
    if typ == "time":
        return _time(val)
    if typ == "fieldsv1":
        raw = next((v for n, _, v in _fields(val) if n == 1), b"")
        return json.loads(raw) if raw else {}
    return message(val, typ)


def _map_value(typ: str, raw: bytes) -> Any:
    if typ == "map:string":
        return raw.decode("utf-8")
    if typ == "map:bytes":
        return base64.b64encode(raw).decode()
    if typ == "map:quantity":
        return next((_text(v) for n, _, v in _fields(raw) if n == 1), "")
    # map:extra -> ExtraValue {repeated string items = 1}
    return [_text(v) for n, _, v in _fields(raw) if n == 1]


def message(data: bytes, name: str) -> dict[str, Any]:
    """Decode message ``name`` into the dict its JSON form would be."""
    schema = SCHEMAS[name]
    by_num = {f[0]: f for f in schema}
    got: dict[str, Any] = {}
    for num, _, val in _fields(data):
        f = by_num.get(num)
        if f is None:
            continue  # unknown field (a newer client): the JSON decoder would drop it too
        _, key, typ, flags = f
        if typ.startswith("map:"):
            k, raw = _map_entry(val)
            got.setdefault(key, {})[k] = _map_value(typ, raw)
        elif "r" in flags:
            got.setdefault(key, []).append(_value(typ, val))
        else:
            got[key] = _value(typ, val)
    out: dict[str, Any] = {}
    for _, key, typ, flags in schema:
        present = key in got
        keep = "k" in flags
        if "r" in flags or "p" in flags or typ.startswith("map:"):
            if present:
                out[key] = got[key]
            elif keep:
                out[key] = None
        elif typ in _SCALAR_ZERO:
            value = got.get(key, _SCALAR_ZERO[typ])
            if keep or value != _SCALAR_ZERO[typ]:
                out[key] = value
        elif typ == "time":
            out[key] = got.get(key)
        else:  # a non-pointer struct: always in the JSON form
            out[key] = got[key] if present else message(b"", typ)
    return out


def decode(body: bytes) -> dict[str, Any] | None:
    """The JSON-shaped object of a protobuf body, or ``None`` for a type not handled here."""
    if not body.startswith(MAGIC):
        raise ApiError(
            400,
            "provided data does not appear to be a protobuf message, expected prefix "
            f"{list(MAGIC)}",
            "BadRequest",
        )
    try:
        api_version = kind = encoding = ""
        raw = b""
        for num, _, val in _fields(body[len(MAGIC) :]):
            if num == 1:
                for n2, _, v2 in _fields(val):
                    if n2 == 1:
                        api_version = _text(v2)
                    elif n2 == 2:
                        kind = _text(v2)
            elif num == 2:
                raw = val
            elif num == 3:
                encoding = _text(val)
        name = TOP_LEVEL.get((api_version, kind))
        if name is None or encoding:
            return None
        obj = message(raw, name)
    except (_Malformed, UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, f"error decoding protobuf body: {exc}", "BadRequest") from exc
    return {"kind": kind, "apiVersion": api_version, **obj}
