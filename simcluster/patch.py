"""PATCH bodies: JSON merge patch, strategic merge patch and JSON patch, as the API server
applies and validates them.

:func:`apply_patch` follows k8s.io/apiserver ``pkg/endpoints/handlers/patch.go``:

- merge and JSON patches (``jsonPatcher``): with ``fieldValidation`` Strict/Warn the patch
  is first decoded strictly (duplicate keys; for JSON patch unknown operation fields,
  ``json patch unknown field "[0].foo"``), applied to the current object's JSON, and the
  result decoded into the type; a wrong type or (Strict) an unknown field is a 422
  ``"" is invalid: patch: Invalid value: "<patched JSON>": ...``. A JSON patch that does
  not apply is a 422 with the generic ``the server rejected our request due to an error in
  our request``.
- strategic merge patch (``smpPatcher``, :mod:`simcluster.smp`): the result goes through
  the unstructured converter (``FromUnstructuredWithValidation``); its 422 shows
  ``%+v`` of the patch map.

Server-side apply lives in :mod:`simcluster.ssa`; its field checks in
:mod:`simcluster.fieldvalidation`.
"""

from __future__ import annotations

import copy
from typing import Any

from simcluster import decoding, fieldvalidation, gofmt, schema, smp
from simcluster.errors import ApiError
from simcluster.resources import ResourceType

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
MAX_JSON_PATCH_OPERATIONS = 10000


class JSONPatchError(Exception):
    """A JSON patch operation that does not apply (evanphx/json-patch ``Apply`` errors)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (evanphx/json-patch ``MergePatch``)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any], kind: Any) -> Any:
    """Strategic merge patch of ``target`` by ``patch`` for a kind's definition.

    ``kind`` is a :class:`simcluster.schema.Definition` (or its name). Raises
    :class:`simcluster.smp.PatchError`.
    """
    defn = schema.definition(kind) if isinstance(kind, str) else kind
    return smp.strategic_merge(copy.deepcopy(target), copy.deepcopy(patch), defn)


def apply_patch(
    rt: ResourceType, current: dict[str, Any], raw: bytes, ctype: str, mode: str
) -> dict[str, Any]:
    """Apply a merge/strategic/JSON patch to ``current`` and decode the result into the type.

    ``mode`` is the effective ``fieldValidation`` directive; raises :class:`ApiError` with
    the real codes and messages, adds ``Warning``s for Warn.
    """
    if ctype == JSONPATCH:
        return _json_patch_request(rt, current, raw, mode)
    strict_decode = mode in (fieldvalidation.STRICT, fieldvalidation.WARN)
    try:
        patch = decoding.loads(raw or b"{}")
    except ValueError as exc:
        if ctype == MERGE and not strict_decode:
            raise ApiError(400, "Invalid JSON Patch", "BadRequest") from None
        prefix = "error decoding patch: " if ctype == MERGE else ""
        raise ApiError(400, f"{prefix}{exc}", "BadRequest") from None
    if not isinstance(patch, dict) and (ctype == STRATEGIC or strict_decode):
        prefix = "error decoding patch: " if ctype == MERGE else ""
        msg = (
            f"{prefix}json: cannot unmarshal {decoding.json_kind(patch)} into Go value of "
            "type map[string]interface {}"
        )
        raise ApiError(400, msg, "BadRequest")
    dups = fieldvalidation.patch_duplicates(patch) if strict_decode else []
    patch = decoding.clean(patch)
    if ctype == MERGE:
        patched = merge_patch(current, patch)
        if not isinstance(patched, dict):
            raise _not_an_object(rt, patched)
        return fieldvalidation.check_patched(rt, patched, mode, False, gofmt.marshal(patched), dups)
    defn = schema.for_kind(rt.group, rt.version, rt.kind)
    if defn is None:
        return merge_patch(current, patch)
    try:
        patched = smp.strategic_merge(copy.deepcopy(current), patch, defn)
    except smp.PatchError as exc:
        if exc.code == 500:
            raise fieldvalidation.UnknownReasonError(exc.message) from None
        if exc.code == 422:
            raise ApiError(
                422,
                "the server rejected our request due to an error in our request",
                "Invalid",
                {},
            ) from None
        raise ApiError(exc.code, exc.message, "BadRequest") from None
    return fieldvalidation.check_patched(rt, patched, mode, True, gofmt.value_v(patch), dups)


def _not_an_object(rt: ResourceType, value: Any) -> ApiError:
    err = f"json: cannot unmarshal {decoding.json_kind(value)} into Go value of type v1.{rt.kind}"
    return fieldvalidation._patch_invalid(gofmt.marshal(value), err)


def _json_patch_request(
    rt: ResourceType, current: dict[str, Any], raw: bytes, mode: str
) -> dict[str, Any]:
    strict: list[str] = []
    try:
        ops = decoding.loads(raw or b"")
    except ValueError as exc:
        if mode in (fieldvalidation.STRICT, fieldvalidation.WARN):
            raise ApiError(400, f"error decoding patch: {exc}", "BadRequest") from None
        raise ApiError(400, str(exc), "BadRequest") from None
    if not isinstance(ops, list):
        kind = decoding.json_kind(ops)
        if mode in (fieldvalidation.STRICT, fieldvalidation.WARN):
            msg = (
                f"error decoding patch: json: cannot unmarshal {kind} into Go value of type "
                "[]handlers.jsonPatchOp"
            )
        else:
            msg = f"json: cannot unmarshal {kind} into Go value of type jsonpatch.Patch"
        raise ApiError(400, msg, "BadRequest")
    if mode in (fieldvalidation.STRICT, fieldvalidation.WARN):
        strict = fieldvalidation.patch_duplicates(ops, json_patch=True)
    ops = decoding.clean(ops)
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise ApiError(
            413,
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, "
            f"got {len(ops)}",
            "RequestEntityTooLarge",
        )
    try:
        patched = json_patch(current, ops)
    except JSONPatchError:
        raise ApiError(
            422, "the server rejected our request due to an error in our request", "Invalid", {}
        ) from None
    if not isinstance(patched, dict):
        raise _not_an_object(rt, patched)
    return fieldvalidation.check_patched(rt, patched, mode, False, gofmt.marshal(patched), strict)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JSONPatchError(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(doc, list):
            if not p.isdigit():
                raise JSONPatchError(f"invalid index {p!r}")
            doc = doc[int(p)]
        elif isinstance(doc, dict):
            doc = doc[p]
        else:
            raise KeyError(p)
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test).

    Raises :class:`JSONPatchError` when an operation does not apply.
    """
    if not isinstance(ops, list):
        raise JSONPatchError("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        try:
            if not isinstance(op, dict):
                raise JSONPatchError("operation is not an object")
            doc = _apply_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as exc:
            raise JSONPatchError(str(exc)) from exc
    return doc


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    path = op.get("path")
    if not isinstance(path, str):
        raise JSONPatchError("operation missing path")
    parts = _pointer(path)
    if kind == "test":
        if _resolve(doc, parts) != op.get("value"):
            raise JSONPatchError(f"testing value {path} failed")
        return doc
    if kind in ("move", "copy"):
        src = _pointer(op.get("from", ""))
        value = copy.deepcopy(_resolve(doc, src))
        if kind == "move":
            doc = _remove(doc, src)
        return _add(doc, parts, value)
    if kind == "remove":
        return _remove(doc, parts)
    if kind == "add":
        if "value" not in op:
            raise JSONPatchError("missing value")
        return _add(doc, parts, copy.deepcopy(op["value"]))
    if kind == "replace":
        if "value" not in op:
            raise JSONPatchError("missing value")
        _resolve(doc, parts)  # must exist
        doc = _remove(doc, parts)
        return _add(doc, parts, copy.deepcopy(op["value"]))
    raise JSONPatchError(f"Unexpected kind: {kind}")


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            idx = int(last)
            if idx > len(parent) or idx < 0:
                raise IndexError(f"index {idx} out of range")
            parent.insert(idx, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise KeyError(last)
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return None
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        del parent[last]
    return doc


def load_body(raw: bytes) -> Any:
    """Decode a JSON body, keeping what strict decoding needs (duplicate keys, number text).

    400 with Go's syntax-error text when it does not parse; the caller (create/update)
    words it as the API server's decoder does.
    """
    if not raw:
        return {}
    try:
        return decoding.loads(raw)
    except ValueError as exc:
        raise ApiError(400, str(exc), "BadRequest") from exc
