"""Patch formats: JSON merge patch, strategic merge patch and JSON patch.

Supported: JSON merge patch (RFC 7386), a strategic merge patch covering the list merge keys
that matter for nodes/pods (containers, conditions, taints, ...) and JSON patch (RFC 6902).
Server-side apply lives in :mod:`simcluster.ssa`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from simcluster.errors import ApiError

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

# Strategic merge keys for lists (patchMergeKey in the Kubernetes API types).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "conditions": "type",
    "taints": "key",
    "addresses": "type",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
}

# Fields never tracked by managedFields.


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge patch: merge patch plus keyed list merging and ``$patch`` directives."""
    if isinstance(patch, list):
        key = MERGE_KEYS.get(field)
        if key and isinstance(target, list) and all(isinstance(x, dict) for x in patch):
            return _merge_keyed_list(target, patch, key, field)
        return copy.deepcopy([x for x in patch if not _is_directive(x)])
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return copy.deepcopy({k: v for k, v in patch.items() if not k.startswith("$")})
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            result.pop(k, None)
            continue
        merged = strategic_merge_patch(result.get(k), v, k)
        if merged is None and isinstance(v, dict) and v.get("$patch") == "delete":
            result.pop(k, None)
        else:
            result[k] = merged
    return result


def _is_directive(x: Any) -> bool:
    return isinstance(x, dict) and "$patch" in x


def _merge_keyed_list(target: list[Any], patch: list[Any], key: str, field: str) -> list[Any]:
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return copy.deepcopy([x for x in patch if not _is_directive(x)])
    result = [copy.deepcopy(x) for x in target]
    for item in patch:
        k = item.get(key)
        idx = next(
            (i for i, x in enumerate(result) if isinstance(x, dict) and x.get(key) == k), None
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
            continue
        if idx is None:
            result.append(strategic_merge_patch({}, item, field))
        else:
            result[idx] = strategic_merge_patch(result[idx], item, field)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer: {path!r}", "Invalid")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(doc, list):
            doc = doc[int(p)]
        elif isinstance(doc, dict):
            doc = doc[p]
        else:
            raise KeyError(p)
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise ApiError(400, "json patch must be a list of operations", "BadRequest")
    doc = copy.deepcopy(target)
    for op in ops:
        try:
            doc = _apply_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(
                422, f"the server rejected our request due to an error in our request: {exc}"
            ) from exc
    return doc


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    parts = _pointer(op.get("path", ""))
    if kind == "test":
        if _resolve(doc, parts) != op.get("value"):
            raise ValueError(f"testing value {op.get('path')} failed")
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
        return _add(doc, parts, copy.deepcopy(op["value"]))
    if kind == "replace":
        _resolve(doc, parts)  # must exist
        doc = _remove(doc, parts)
        return _add(doc, parts, copy.deepcopy(op["value"]))
    raise ValueError(f"unknown json patch operation {kind!r}")


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
            if idx > len(parent):
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
    """Decode a JSON body; 400 with the API server's wording when it does not parse."""
    try:
        return json.loads(raw) if raw else {}
    except ValueError as exc:
        raise ApiError(400, f"error decoding request body: {exc}", "BadRequest") from exc
