"""``fieldValidation`` on create, update and patch, worded as the API server words it.

Follows k8s.io/apiserver ``pkg/endpoints/handlers/create.go``, ``update.go``, ``patch.go``
and ``rest.go`` (``fieldValidation()`` defaults to ``Warn``, ``transformDecodeError``,
``addStrictDecodingWarnings`` / ``parseYAMLWarnings``), k8s.io/apimachinery
``pkg/apis/meta/v1/validation/validation.go`` (``ValidateCreateOptions`` ...: an invalid
``fieldValidation`` or ``dryRun`` value is a 422 on ``CreateOptions.meta.k8s.io``) and
``pkg/util/managedfields/internal/structuredmerge.go`` (apply: an undeclared field is a
plain error, so a 500 with no reason: ``failed to create typed patch object (ns/name;
/v1, Kind=ConfigMap): .foo: field not declared in schema``).

The decoding itself is :mod:`simcluster.decoding`.
"""

from __future__ import annotations

from typing import Any

import yaml

from simcluster import context, gofmt
from simcluster.decoding import Fatal, Pairs, Walker, clean
from simcluster.errors import ApiError
from simcluster.resources import ResourceType
from simcluster.schema import Definition, definition, for_kind

STRICT, WARN, IGNORE = "Strict", "Warn", "Ignore"
_ALLOWED = ("", IGNORE, STRICT, WARN)


class UnknownReasonError(ApiError):
    """A non-Status error the API server turns into a 500 whose ``reason`` is empty."""

    def __init__(self, message: str) -> None:
        super().__init__(500, message)

    def status(self) -> dict[str, Any]:
        body = super().status()
        body.pop("reason", None)
        return body


def _invalid(kind: str, name: str, field: str, cause_type: str, body: str) -> ApiError:
    """``errors.NewInvalid`` with one cause (``kind`` is the qualified kind, may be "")."""
    details: dict[str, Any] = {}
    if "." in kind:
        details["kind"], details["group"] = kind.split(".", 1)
    elif kind:
        details["kind"] = kind
    if name:
        details["name"] = name
    details["causes"] = [{"reason": cause_type, "message": body, "field": field}]
    return ApiError(
        422, f"{kind} {gofmt.quote(name)} is invalid: {field}: {body}", "Invalid", details
    )


def directive(params: dict[str, str], options_kind: str) -> str:
    """The effective directive for a write; 422 for values the options validation refuses.

    ``options_kind`` is ``CreateOptions``, ``UpdateOptions`` or ``PatchOptions``.
    """
    qualified = f"{options_kind}.meta.k8s.io"
    value = params.get("fieldValidation", "")
    if value not in _ALLOWED:
        supported = ", ".join(gofmt.quote(v) for v in _ALLOWED)
        body = f"Unsupported value: {gofmt.quote(value)}: supported values: {supported}"
        raise _invalid(qualified, "", "fieldValidation", "FieldValueNotSupported", body)
    dry = params.get("dryRun")
    if dry is not None and dry != "All":
        body = f'Unsupported value: []string{{{gofmt.quote(dry)}}}: supported values: "All"'
        raise _invalid(qualified, "", "dryRun", "FieldValueNotSupported", body)
    return value or WARN


def _warn_all(messages: list[str]) -> None:
    for m in messages:
        for line in _yaml_warning_lines(m):
            context.warn(line)


def _yaml_warning_lines(message: str) -> list[str]:
    for prefix in (
        "error converting YAML to JSON: yaml: unmarshal errors:\n",
        "yaml: unmarshal errors:\n",
    ):
        if message.startswith(prefix):
            return [s.strip() for s in message[len(prefix) :].split("\n")]
    return [message]


def _definition(rt: ResourceType) -> Definition | None:
    return for_kind(rt.group, rt.version, rt.kind)


def decode_body(rt: ResourceType, body: Any, params: dict[str, str], options_kind: str) -> Any:
    """Decode a create/update body; returns the typed object (unknown fields dropped).

    400 ``<Kind> in version "v1" cannot be handled as a <Kind>: ...`` for wrong types and,
    with ``Strict``, for unknown or duplicate fields (``strict decoding error: ...``).
    """
    mode = directive(params, options_kind)
    d = _definition(rt)
    if d is None or not isinstance(body, dict):
        return clean(body)
    kind = body.get("kind") if isinstance(body.get("kind"), str) and body.get("kind") else rt.kind
    api_version = body.get("apiVersion") if isinstance(body.get("apiVersion"), str) else ""
    version = api_version.rsplit("/", 1)[-1] if api_version else rt.version
    head = f"{kind} in version {gofmt.quote(version)} cannot be handled as a {rt.kind}"
    w = Walker()
    try:
        out = w.decode(d, body)
    except Fatal as exc:
        raise ApiError(400, f"{head}: {exc}", "BadRequest") from None
    if w.error:
        raise ApiError(400, f"{head}: {w.error}", "BadRequest")
    strict = yaml_strict_errors(body) + w.strict
    if strict and mode == STRICT:
        msg = f"{head}: strict decoding error: {', '.join(strict)}"
        raise ApiError(400, msg, "BadRequest")
    if strict and mode == WARN:
        _warn_all(strict)
    return out


def check_patched(
    rt: ResourceType,
    patched: dict[str, Any],
    mode: str,
    strategic: bool,
    patch_value: str,
    patch_strict: list[str],
) -> dict[str, Any]:
    """Decode a merge/JSON/strategic patch result into the type, as ``patch.go`` does.

    ``patch_value`` is what the 422 shows as ``patch: Invalid value:`` (the patched JSON for
    merge and JSON patches, ``%+v`` of the patch map for strategic ones); ``patch_strict``
    are the strict errors found while decoding the patch itself (duplicate keys).
    """
    d = _definition(rt)
    if d is None:
        return patched
    w = Walker("unstructured" if strategic else "json", sort_keys=not strategic)
    try:
        out = w.decode(d, patched)
    except Fatal as exc:
        raise _patch_invalid(patch_value, str(exc)) from None
    if w.error:
        raise _patch_invalid(patch_value, w.error)
    unknown = sorted(w.strict) if strategic else w.strict
    strict = patch_strict + unknown if mode in (STRICT, WARN) else []
    if strict and mode == WARN:
        _warn_all(strict)
    elif strict:
        raise _patch_invalid(patch_value, "strict decoding error: " + ", ".join(strict))
    return out


def _patch_invalid(value: str, detail: str) -> ApiError:
    return _invalid(
        "", "", "patch", "FieldValueInvalid", f"Invalid value: {gofmt.quote(value)}: {detail}"
    )


def patch_duplicates(patch: Any, json_patch: bool = False) -> list[str]:
    """Duplicate-key strict errors of a decoded patch (``kjson.UnmarshalStrict`` into a map)."""
    out: list[str] = []

    def walk(v: Any, path: str) -> None:
        if isinstance(v, dict):
            items = v.pairs if isinstance(v, Pairs) else list(v.items())
            seen: set[str] = set()
            for k, x in items:
                p = f"{path}.{k}" if path else k
                if k in seen:
                    out.append(f'duplicate field "{p}"')
                seen.add(k)
                walk(x, p)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, f"{path}[{i}]")

    walk(patch, "")
    if json_patch:
        for i, op in enumerate(patch if isinstance(patch, list) else []):
            if isinstance(op, dict):
                out += [
                    f'json patch unknown field "[{i}].{k}"'
                    for k in op
                    if k not in ("op", "path", "from", "value")
                ]
        out = [m if m.startswith("json patch") else "json patch " + m for m in out]
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------ apply (YAML)
class YamlDoc(dict):
    """A YAML request body (a mapping) with the duplicate-key lines found while parsing."""

    __slots__ = ("yaml_dups",)


def yaml_body(raw: bytes) -> Any:
    """Parse an ``application/yaml`` body for :func:`decode_body` (duplicates kept)."""
    try:
        obj, dups = load_yaml(raw)
    except yaml.YAMLError as exc:
        raise ApiError(400, f"error converting YAML to JSON: {exc}", "BadRequest") from None
    if isinstance(obj, dict):
        doc = YamlDoc(obj)
        doc.yaml_dups = dups
        return doc
    return obj


class _DupLoader(yaml.SafeLoader):
    """SafeLoader that records repeated mapping keys the way yaml.v2's strict mode does."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.dups: list[str] = []

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # complex keys: the base class reports what it cannot hash
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                shown = gofmt.quote(key) if isinstance(key, str) else gofmt.value_v(key)
                self.dups.append(
                    f"line {key_node.start_mark.line + 1}: key {shown} already set in map"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(raw: bytes) -> tuple[Any, list[str]]:
    """Parse YAML (or JSON) and the duplicate-key lines yaml.v2's strict mode reports."""
    loader = _DupLoader(raw)
    try:
        return loader.get_single_data(), loader.dups
    finally:
        loader.dispose()


def yaml_strict_errors(body: Any) -> list[str]:
    """The YAML duplicate-key error of a body parsed by :func:`load_yaml` (kept on it)."""
    dups = getattr(body, "yaml_dups", None) if isinstance(body, dict) else None
    if not dups:
        return []
    return ["error converting YAML to JSON: yaml: unmarshal errors:\n  " + "\n  ".join(dups)]


def check_apply(rt: ResourceType, body: dict[str, Any]) -> None:
    """structured-merge-diff's check of an apply patch: undeclared fields -> 500."""
    d = _definition(rt)
    if d is None:
        return
    errs = _smd_errors(d, body, "")
    if not errs:
        return
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    group = rt.group
    text = errs[0] if len(errs) == 1 else "errors:\n" + "\n".join("  " + e for e in errs)
    raise UnknownReasonError(
        f"failed to create typed patch object ({ns}/{name}; {group}/{rt.version}, "
        f"Kind={rt.kind}): {text}"
    )


def apply_strict(raw: bytes, params: dict[str, str]) -> None:
    """After the apply: with Strict (400) or Warn, report duplicate keys of the YAML."""
    mode = params.get("fieldValidation") or WARN
    if mode not in (STRICT, WARN):
        return
    try:
        _, dups = load_yaml(raw)
    except yaml.YAMLError:
        return
    if not dups:
        return
    err = "error converting YAML to JSON: yaml: unmarshal errors:\n  " + "\n  ".join(dups)
    if mode == STRICT:
        raise ApiError(400, f"error strict decoding YAML: {err}", "BadRequest")
    _warn_all([err])


def _smd_scalar_error(name: str, v: Any) -> str | None:
    if v is None or name in ("object", "rawext", "fieldsv1", "quantity", "intstr"):
        return None
    if isinstance(v, dict | list):
        return None if name == "object" else f"expected {_smd_kind(name)}, got {_smd_repr(v)}"
    if name in ("int32", "int64", "number"):
        if isinstance(v, int | float) and not isinstance(v, bool):
            return None
        return f"expected numeric (int or float), got {_go_type_of(v)}"
    if name == "boolean":
        return None if isinstance(v, bool) else f"expected boolean, got &{{{gofmt.value_v(v)}}}"
    if isinstance(v, str):
        return None
    return f"expected string, got &value.valueUnstructured{{Value:{_go_sharp(v)}}}"


def _smd_kind(name: str) -> str:
    return {"boolean": "boolean", "string": "string"}.get(name, "numeric (int or float)")


def _smd_repr(v: Any) -> str:
    return f"&value.valueUnstructured{{Value:{_go_sharp(v)}}}"


def _go_type_of(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "map[string]interface {}"
    if isinstance(v, list):
        return "[]interface {}"
    return "float64" if isinstance(v, float) else "int64"


def _go_sharp(v: Any) -> str:
    if isinstance(v, str):
        return gofmt.quote(v)
    if isinstance(v, dict):
        inner = ", ".join(f"{gofmt.quote(k)}:{_go_sharp(v[k])}" for k in sorted(v))
        return "map[string]interface {}{" + inner + "}"
    if isinstance(v, list):
        return "[]interface {}{" + ", ".join(_go_sharp(x) for x in v) + "}"
    return gofmt.value_v(v)


def _smd_errors(d: Definition, v: Any, prefix: str) -> list[str]:
    if not isinstance(v, dict):
        return [] if v is None else [f"{prefix}: expected map, got {_smd_repr(v)}"]
    errs: list[str] = []
    for k in sorted(v):
        f = d.fields.get(k)
        path = f"{prefix}.{k}"
        if f is None:
            errs.append(f"{path}: field not declared in schema")
            break
        errs += _smd_value(f.type, f.list_type, f.list_keys, v[k], path)
    return errs


def _smd_value(t: Any, list_type: str, keys: tuple[str, ...], v: Any, path: str) -> list[str]:
    if v is None:
        return []
    if t.kind == "ref":
        return _smd_errors(definition(t.name), v, path)
    if t.kind == "map":
        if not isinstance(v, dict):
            return [f"{path}: expected map, got {_smd_repr(v)}"]
        out: list[str] = []
        for k in sorted(v):
            out += _smd_value(t.item, "", (), v[k], f"{path}.{k}")
        return out
    if t.kind == "list":
        if not isinstance(v, list):
            return [f"{path}: expected list, got {_smd_repr(v)}"]
        out = []
        for i, x in enumerate(v):
            pe = f"[{i}]"
            if list_type == "map" and keys and isinstance(x, dict):
                parts = []
                for key in sorted(keys):
                    kv = x.get(key, "TCP" if key == "protocol" else None)
                    if kv is None:
                        return [
                            f"{path}: element {i}: associative list with keys has an element "
                            f'that omits key field "{key}" (and doesn\'t have default value)'
                        ]
                    parts.append(f"{key}={gofmt.quote(kv) if isinstance(kv, str) else kv}")
                pe = "[" + ",".join(parts) + "]"
            elif list_type == "set":
                pe = f"[={gofmt.quote(x) if isinstance(x, str) else gofmt.value_v(x)}]"
            out += _smd_value(t.item, "", (), x, path + pe)
        return out
    err = _smd_scalar_error(t.name, v)
    return [f"{path}: {err}"] if err else []


def unrecognized(rt: ResourceType, raw: bytes, err: str) -> ApiError:
    """``transformDecodeError`` when the body's kind cannot even be read (rest.go)."""
    if not raw:
        summary = "<empty>"
    elif raw[:1] == b"{":
        summary = raw[:30].decode("utf-8", "replace") + (" ..." if len(raw) > 30 else "")
    else:
        summary = raw[:30].hex() + (" ..." if len(raw) > 30 else "")
    return ApiError(
        400,
        f"the object provided is unrecognized (must be of type {rt.kind}): couldn't get "
        f"version/kind; json parse error: {err} ({summary})",
        "BadRequest",
    )


_SUBRESOURCE_KINDS = {
    "Eviction": ResourceType("pods/eviction", "Eviction", "policy", "v1", True),
    "TokenRequest": ResourceType(
        "serviceaccounts/token", "TokenRequest", "authentication.k8s.io", "v1", True
    ),
}


def decode_sub(kind: str, body: Any, params: dict[str, str]) -> Any:
    """:func:`decode_body` for a subresource's own kind (``pods/eviction``, ``.../token``)."""
    return decode_body(_SUBRESOURCE_KINDS[kind], body, params, "CreateOptions")
