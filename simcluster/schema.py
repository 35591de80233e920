"""Type schemas for the served kinds, built lazily from the official client's models.

Field validation (:mod:`simcluster.decoding`), strategic merge patch
(:mod:`simcluster.patch`) and the OpenAPI documents (:mod:`simcluster.openapi`) all need to
know, for every field of every served type, its JSON name, its type and its patch and list
semantics. The installed ``kubernetes`` client carries the generated form of the same Go
types (``V1PodSpec.openapi_types`` / ``attribute_map``, property docstrings for
``kubectl explain``); :mod:`simcluster.typedefs` adds what the models lose (int64 vs int32,
quantities, int-or-string, patch strategies, list types, required fields, Go type names).

A resource type only names its group/version/kind: :func:`for_kind` finds the definition
``io.k8s.api.<package>.<Kind>`` and everything it references follows. Nothing is built
at import or startup: the first write that needs a schema imports the client models
(~0.4 s once per process) and each definition is built once, then cached.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from simcluster import typedefs
from simcluster.kueue_types import DESCRIPTIONS as KUEUE_DESCRIPTIONS

# Leaf types: the JSON value they accept and their OpenAPI rendering live with the users.
SCALARS = frozenset(
    {
        "string",
        "boolean",
        "int32",
        "int64",
        "number",
        "byte",
        "quantity",
        "intstr",
        "time",
        "microtime",
        "fieldsv1",
        "rawext",
        "object",
    }
)
_GO_SCALAR = {
    "string": "string",
    "boolean": "bool",
    "int32": "int32",
    "int64": "int64",
    "number": "float64",
    "byte": "[]uint8",
    "quantity": "resource.Quantity",
    "intstr": "intstr.IntOrString",
    "time": "v1.Time",
    "microtime": "v1.MicroTime",
    "fieldsv1": "v1.FieldsV1",
    "rawext": "runtime.RawExtension",
    "object": "interface {}",
}
_CLIENT_SCALAR = {
    "str": "string",
    "int": "int32",
    "bool": "boolean",
    "float": "number",
    "datetime": "time",
    "object": "object",
}
_GROUP_CAMEL = {
    "io.k8s.api.core.v1": "CoreV1",
    "io.k8s.api.policy.v1": "PolicyV1",
    "io.k8s.api.scheduling.v1": "SchedulingV1",
    "io.k8s.api.rbac.v1": "RbacV1",
    "io.k8s.api.coordination.v1": "CoordinationV1",
    "io.k8s.api.authorization.v1": "AuthorizationV1",
    "io.k8s.api.authentication.v1": "AuthenticationV1",
    "io.k8s.api.apps.v1": "AppsV1",
    "io.k8s.api.batch.v1": "BatchV1",
    "io.k8s.api.networking.v1": "NetworkingV1",
    typedefs.META: "MetaV1",
    "com.nvidia.v1": "NvidiaV1",  # a CRD's models: simcluster/clusterpolicy.py
    "io.x-k8s.kueue.v1beta2": "KueueV1beta2",  # Kueue's CRDs: simcluster/kueue_types.py
}
_CAMEL_PACKAGE = {v: k for k, v in _GROUP_CAMEL.items()}


@dataclass(frozen=True, slots=True)
class Type:
    """A field's type: a scalar leaf, a reference to a definition, or a list/map of a type."""

    kind: str  # "scalar" | "ref" | "list" | "map"
    name: str = ""  # scalar name or definition name
    item: Type | None = None

    @property
    def leaf(self) -> Type:
        t = self
        while t.item is not None:
            t = t.item
        return t


@dataclass(slots=True)
class Field:
    """One property of a definition, with the Go facts that the client models drop."""

    name: str
    attr: str
    type: Type
    go: str
    required: bool = False
    patch_strategy: tuple[str, ...] = ()
    merge_key: str = ""
    list_type: str = ""
    list_keys: tuple[str, ...] = ()
    map_type: str = ""


@dataclass(slots=True)
class Definition:
    """One OpenAPI definition (a Go struct): its fields in the models' order."""

    name: str
    cls: Any
    fields: dict[str, Field] = field(default_factory=dict)
    atomic: bool = False

    @property
    def short(self) -> str:
        """The Go struct name (``PodSpec``), as ``encoding/json`` errors print it."""
        return self.name.rsplit(".", 1)[1]

    @property
    def go(self) -> str:
        return "v1." + self.short

    def description(self, attr: str | None = None) -> str:
        """The field's description from the model's property docstring ("" for the type)."""
        if attr is None:
            return _KIND_DESCRIPTIONS.get(self.short, "")
        prop = getattr(self.cls, attr, None)
        return _docstring_body(getattr(prop, "__doc__", None) or "")


_lock = threading.RLock()
_defs: dict[str, Definition] = {}


def _models() -> Any:
    from kubernetes.client import models

    return models


@cache
def _class_index() -> dict[str, str]:
    """Client class name -> definition name, for every class this simulator may reach."""
    out: dict[str, str] = {}
    for pkg_short, names in typedefs.NON_CORE.items():
        for n in names.split():
            out["V1" + n] = typedefs.expand(f"{pkg_short}.{n}")
    return out


def def_for_class(cls_name: str) -> str:
    """``V1PodSpec`` -> ``io.k8s.api.core.v1.PodSpec``; ``CoreV1Event`` -> its package."""
    known = _class_index().get(cls_name)
    if known:
        return known
    m = re.match(r"^([A-Z][a-z]+V1(?:beta\d+)?)([A-Z]\w*)$", cls_name)
    if m and m.group(1) in _CAMEL_PACKAGE:
        return f"{_CAMEL_PACKAGE[m.group(1)]}.{m.group(2)}"
    if cls_name.startswith("V1"):
        return f"io.k8s.api.core.v1.{cls_name[2:]}"
    raise KeyError(cls_name)


def class_for_def(name: str) -> Any:
    """The client model class of a definition (``CoreV1Event`` before ``V1Event``)."""
    models = _models()
    pkg, short = name.rsplit(".", 1)
    if pkg == "com.nvidia.v1":
        from simcluster.clusterpolicy import MODELS

        return MODELS[_GROUP_CAMEL[pkg] + short]
    if pkg == "io.x-k8s.kueue.v1beta2":
        from simcluster.kueue_types import MODELS as KUEUE_MODELS

        return KUEUE_MODELS[_GROUP_CAMEL[pkg] + short]
    for cand in (_GROUP_CAMEL.get(pkg, "") + short, "V1" + short):
        cls = getattr(models, cand, None)
        if cls is not None and hasattr(cls, "openapi_types") and def_for_class(cand) == name:
            return cls
    raise KeyError(name)


def for_kind(group: str, version: str, kind: str) -> Definition | None:
    """The definition of a served kind, or None when the client has no model for it."""
    pkg = typedefs.GROUP_PACKAGES.get(group)
    if pkg is None or version != typedefs.GROUP_VERSION.get(group, "v1"):
        return None
    try:
        return definition(f"{pkg}.{kind}")
    except KeyError:
        return None


def definition(name: str) -> Definition:
    """A definition by name (``io.k8s.api.core.v1.Pod``); KeyError if unknown."""
    d = _defs.get(name)
    if d is not None:
        return d
    with _lock:
        d = _defs.get(name)
        if d is None:
            d = _build(name)
            _defs[name] = d
        return d


def _parse_facts(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split():
        k, _, v = part.partition("=")
        out[k] = v or "1"
    return out


def _client_type(t: str, leaf_override: str | None) -> tuple[Type, str]:
    """Client type string -> (Type, derived Go type name)."""
    if t.startswith("list["):
        inner, go = _client_type(t[5:-1], leaf_override)
        return Type("list", item=inner), "[]" + go
    m = re.match(r"^dict[\[(]str, (.+)[\])]$", t)
    if m:
        inner, go = _client_type(m.group(1), leaf_override)
        return Type("map", item=inner), "map[string]" + go
    if t in _CLIENT_SCALAR:
        scalar = leaf_override or _CLIENT_SCALAR[t]
        return Type("scalar", scalar), _GO_SCALAR[scalar]
    ref = def_for_class(t)
    return Type("ref", ref), "v1." + ref.rsplit(".", 1)[1]


def _build(name: str) -> Definition:
    cls = class_for_def(name)
    short = typedefs.shorten(name)
    facts = typedefs.FIELDS.get(short, {})
    newer = set(typedefs.NEWER_THAN_1_32.get(short, ()))
    d = Definition(name, cls, atomic=short in typedefs.ATOMIC_STRUCTS)
    for attr, ctype in cls.openapi_types.items():
        json_name = cls.attribute_map[attr]
        if json_name in newer:
            continue
        f = _parse_facts(facts.get(json_name, ""))
        typ, go = _client_type(ctype, f.get("t"))
        d.fields[json_name] = Field(
            name=json_name,
            attr=attr,
            type=typ,
            go=f.get("go", go),
            required="req" in f,
            patch_strategy=tuple(f["ps"].split(",")) if "ps" in f else (),
            merge_key=f.get("pk", ""),
            list_type=f.get("lt", ""),
            list_keys=tuple(f["lk"].split(",")) if "lk" in f else (),
            map_type=f.get("mt", ""),
        )
    return d


def _docstring_body(doc: str) -> str:
    """The description paragraph of a generated property docstring."""
    parts = [p.strip() for p in doc.split("\n\n")]
    if len(parts) < 3:
        return ""
    body = parts[1]
    if body.startswith(":return:"):
        return ""
    return re.sub(r"\s*# noqa: E501$", "", body).strip()


def reachable(roots: list[str]) -> list[str]:
    """Every definition reachable from ``roots`` (roots first, then breadth-first)."""
    seen: dict[str, None] = {}
    todo = list(roots)
    while todo:
        n = todo.pop(0)
        if n in seen:
            continue
        try:
            d = definition(n)
        except KeyError:
            continue
        seen[n] = None
        for f in d.fields.values():
            leaf = f.type.leaf
            if leaf.kind == "ref" and leaf.name not in seen:
                todo.append(leaf.name)
    return list(seen)


# Short type descriptions for ``kubectl explain <kind>`` (the client models carry field
# descriptions only); written for this simulator.
_KIND_DESCRIPTIONS: dict[str, str] = {
    "Pod": "Pod is a collection of containers that can run on a host.",
    "Node": "Node is a worker node in the cluster.",
    "Namespace": "Namespace provides a scope for names.",
    "ResourceQuota": "ResourceQuota sets aggregate quota restrictions enforced per namespace.",
    "ConfigMap": "ConfigMap holds configuration data for pods to consume.",
    "Secret": "Secret holds secret data of a certain type.",
    "Service": "Service is a named abstraction of a software service.",
    "ServiceAccount": "ServiceAccount binds together a name, secrets and a principal identity.",
    "Event": "Event is a report of an event somewhere in the cluster.",
    "LimitRange": "LimitRange sets resource usage limits for each kind of resource in a namespace.",
    "PodDisruptionBudget": "PodDisruptionBudget limits the disruption of a collection of pods.",
    "PriorityClass": "PriorityClass maps a priority class name to a priority value.",
    "Lease": "Lease defines a lease concept.",
    "ClusterPolicy": "ClusterPolicy is the Schema for the clusterpolicies API",
    **KUEUE_DESCRIPTIONS,  # simcluster/kueue_types.py
}
