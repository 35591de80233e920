"""Strategic merge patch, applied the way the API server applies it.

Follows k8s.io/apimachinery ``pkg/util/strategicpatch/patch.go``
(``StrategicMergeMapPatch`` -> ``mergeMap`` with ``MergeParallelList`` and
``IgnoreUnmatchedNulls``), driven by the patch metadata of the Go types as
``PatchMetaFromStruct`` reads it (``meta.go``): a list is merged only where its field has
``patchStrategy:"merge"`` (by ``patchMergeKey`` for lists of objects, as a set for lists of
scalars such as ``metadata.finalizers``); every other list (``spec.taints``,
``spec.tolerations``) is replaced. Directives: ``$patch: replace|delete`` (maps and list
items; ``merge`` in a list is refused), ``$deleteFromPrimitiveList/<field>``,
``$setElementOrder/<field>``, ``$retainKeys``; ``null`` deletes. Errors carry the real
text and the HTTP code ``interpretStrategicMergePatchError`` (``handlers/patch.go``) gives
them: 400 for malformed directives, 422 for lists of lists, otherwise a 500 without reason.

Like the Go code, the functions mutate both ``original`` and ``patch``: the API server
prints the (mutated) patch map in its 422 messages.
"""

from __future__ import annotations

from typing import Any

from simcluster import gofmt
from simcluster.schema import Definition, Type, definition
from simcluster.smp_order import (
    MARKER,
    PatchError,
    bad_arg_type,
    eq,
    find,
    hkey,
    no_merge_key,
    normalize_order,
    partition_maps,
    partition_primitives,
    split_deletes,
)

DELETE_PRIMITIVE = "$deleteFromPrimitiveList"
RETAIN_KEYS = "$retainKeys"
SET_ORDER = "$setElementOrder"

BAD_PRIMITIVE_LIST = "invalid patch format of primitive list"
BAD_RETAIN_KEYS = "invalid patch format of retainKeys"
BAD_SET_ORDER = "invalid patch format of setElementOrder list"
NO_LIST_OF_LISTS = "lists of lists are not supported"


class Meta:
    """``LookupPatchMeta`` over the schema: a struct (definition) or a map's value type."""

    __slots__ = ("defn", "typ")

    def __init__(self, defn: Definition | None, typ: Type | None = None) -> None:
        self.defn = defn
        self.typ = typ

    @classmethod
    def of(cls, t: Type | None) -> Meta:
        if t is not None and t.kind == "ref":
            return cls(definition(t.name))
        return cls(None, t)

    def name(self) -> str:
        return "struct" if self.defn is not None else _kind_name(self.typ)

    def for_struct(self, key: str) -> tuple[Meta, tuple[str, ...], str]:
        if self.defn is None:
            if self.typ is not None and self.typ.kind == "map":
                return Meta.of(self.typ.item), (), ""
            raise PatchError(
                "merging an object in json but data type is not map or struct, instead is: "
                + _kind_name(self.typ)
            )
        f = self.defn.fields.get(key)
        if f is None:
            raise PatchError(
                f"unable to find api field in struct {self.defn.short} for the json field "
                f"{gofmt.quote(key)}"
            )
        return Meta.of(f.type), f.patch_strategy, f.merge_key

    def for_slice(self, key: str) -> tuple[Meta, tuple[str, ...], str]:
        sub, strategies, merge_key = self.for_struct(key)
        t = sub.typ
        if sub.defn is not None or t is None or t.kind != "list":
            raise PatchError(f"expected slice or array type, but got: {sub.name()}")
        item = t.item
        if item is not None and item.kind == "list":
            raise PatchError("unexpected slice of slice")
        return Meta.of(item), strategies, merge_key


def _kind_name(t: Type | None) -> str:
    if t is None:
        return "interface"
    return {"list": "slice", "map": "map", "ref": "struct"}.get(t.kind) or {
        "string": "string",
        "boolean": "bool",
        "int32": "int32",
        "int64": "int64",
        "number": "float64",
    }.get(t.name, "struct")


def strategic_merge(original: dict[str, Any], patch: dict[str, Any], root: Definition) -> Any:
    """``StrategicMergeMapPatch(original, patch, <the kind's Go struct>)``."""
    return merge_map(original, patch, Meta(root))


def _retain_keys(strategies: tuple[str, ...]) -> str:
    if len(strategies) == 0:
        return ""
    if len(strategies) == 1:
        return "" if strategies[0] == "retainKeys" else strategies[0]
    if len(strategies) == 2 and "retainKeys" in strategies:
        return strategies[1] if strategies[0] == "retainKeys" else strategies[0]
    raise PatchError(f"unexpected patch strategy: [{' '.join(strategies)}]")


def merge_map(original: Any, patch: dict[str, Any], schema: Meta) -> Any:
    """``mergeMap``: merge ``patch`` into ``original`` following the schema's strategies."""
    if MARKER in patch:
        directive = patch[MARKER]
        if directive == "replace":
            del patch[MARKER]
            return patch
        if directive == "delete":
            return {}
        raise PatchError(
            f"unknown patch type: {gofmt.value_v(directive)} in map: {gofmt.value_v(patch)}"
        )
    if original is None:
        original = {}
    _apply_retain_keys(original, patch)
    _merge_set_element_order(original, patch, schema)
    for k in list(patch):
        if k not in patch:
            continue
        patch_v = patch[k]
        is_delete_list = False
        if k.startswith(DELETE_PRIMITIVE):
            k = _extract_key(k, DELETE_PRIMITIVE, BAD_PRIMITIVE_LIST)
            is_delete_list = True
        if patch_v is None:
            original.pop(k, None)
            continue
        if k not in original:
            if not is_delete_list:
                _discard_nulls(patch_v)
                v, keep = remove_directives(patch_v)
                if keep:
                    original[k] = v
                else:
                    original.pop(k, None)
            continue
        ov = original[k]
        if type(ov) is not type(patch_v):
            if not is_delete_list:
                _discard_nulls(patch_v)
                v, keep = remove_directives(patch_v)
                if keep:
                    original[k] = v
                else:
                    original.pop(k, None)
            continue
        if isinstance(ov, dict):
            sub, strategies, _ = schema.for_struct(k)
            strategy = _retain_keys(strategies)
            original[k] = patch_v if strategy == "replace" else merge_map(ov, patch_v, sub)
        elif isinstance(ov, list):
            sub, strategies, merge_key = schema.for_slice(k)
            strategy = _retain_keys(strategies)
            if strategy == "merge" or is_delete_list:
                original[k] = merge_slice(ov, patch_v, sub, merge_key, is_delete_list)
            else:
                original[k] = patch_v
        else:
            v, keep = remove_directives(patch_v)
            if keep:
                original[k] = v
            else:
                original.pop(k, None)
    return original


def _extract_key(s: str, prefix: str, err: str) -> str:
    head, sep, rest = s.partition("/")
    if not sep or head != prefix:
        raise PatchError(err, 400)
    return rest


def _discard_nulls(v: Any) -> None:
    if isinstance(v, dict):
        for k in [k for k, x in v.items() if x is None]:
            del v[k]
        for x in v.values():
            _discard_nulls(x)
    elif isinstance(v, list):
        for x in v:
            _discard_nulls(x)


def remove_directives(obj: Any) -> tuple[Any, bool]:
    """``removeDirectives``: drop ``$patch`` maps; returns (value, keep)."""
    if isinstance(obj, dict):
        if MARKER in obj:
            return None, False
        for k in list(obj):
            v, keep = remove_directives(obj[k])
            if keep:
                obj[k] = v
            else:
                del obj[k]
        return obj, True
    if isinstance(obj, list):
        out = []
        for v in obj:
            nv, keep = remove_directives(v)
            if keep:
                out.append(nv)
        return out, True
    return obj, True


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if RETAIN_KEYS not in patch:
        return
    keys = patch.pop(RETAIN_KEYS)
    if not isinstance(keys, list):
        raise PatchError(BAD_RETAIN_KEYS, 400)
    allowed = {hkey(v) for v in keys}
    for k, v in patch.items():
        if v is None or k.startswith(DELETE_PRIMITIVE) or k.startswith(SET_ORDER):
            continue
        if hkey(k) not in allowed:
            raise PatchError(BAD_RETAIN_KEYS, 400)
    for k in [k for k in original if hkey(k) not in allowed]:
        del original[k]


def _merge_set_element_order(original: dict[str, Any], patch: dict[str, Any], schema: Meta) -> None:
    """``mergePatchIntoOriginal``: the ``$setElementOrder/<field>`` lists."""
    for key in [k for k in patch if k.startswith(SET_ORDER)]:
        order = patch.pop(key)
        if not isinstance(order, list):
            raise bad_arg_type("[]interface {}", order)
        okey = _extract_key(key, SET_ORDER, BAD_SET_ORDER)
        found_o, found_p = okey in original, okey in patch
        ov: list[Any] = []
        pv: list[Any] = []
        if found_o:
            if not isinstance(original[okey], list):
                raise bad_arg_type("[]interface {}", original[okey])
            ov = original[okey]
        if found_p:
            if not isinstance(patch[okey], list):
                raise bad_arg_type("[]interface {}", patch[okey])
            pv = patch[okey]
        sub, strategies, merge_key = schema.for_slice(okey)
        strategy = _retain_keys(strategies)
        _validate_set_order(pv, order, merge_key)
        if found_o and not found_p:
            merged = ov
        elif found_p and not found_o:
            merged, _ = remove_directives(pv)
        elif found_o and found_p:
            merged = merge_slice(ov, pv, sub, merge_key, False) if strategy == "merge" else pv
        else:
            continue
        if merge_key:
            items, server_only = partition_maps(merged, order, merge_key)
        else:
            items, server_only = partition_primitives(merged, order)
        is_map = isinstance(_element_type(ov, pv), dict)
        original[okey] = normalize_order(items, server_only, order, ov, merge_key, is_map)
        patch.pop(okey, None)


def _validate_set_order(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    if not order or not patch_list:
        return
    non_delete = split_deletes(patch_list)[0] if merge_key else patch_list
    pi = si = 0
    while pi < len(non_delete) and si < len(order):
        item = non_delete[pi]
        if isinstance(item, dict) and MARKER in item:
            pi += 1
            continue
        if _merge_key_equal(item, order[si], merge_key):
            pi += 1
        si += 1
    if pi < len(non_delete) and si >= len(order):
        raise PatchError(
            f"The order in patch list:\n{gofmt.value_v(patch_list)}\n doesn't match "
            f"{SET_ORDER} list:\n{gofmt.value_v(order)}\n"
        )


def _merge_key_equal(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return eq(left, right)
    if not isinstance(left, dict):
        raise bad_arg_type("map[string]interface {}", left)
    if not isinstance(right, dict):
        raise bad_arg_type("map[string]interface {}", right)
    if merge_key not in left:
        raise no_merge_key(left, merge_key)
    if merge_key not in right:
        raise no_merge_key(right, merge_key)
    return eq(left[merge_key], right[merge_key])


def _element_type(*lists: list[Any]) -> Any:
    """``sliceElementType``: a representative element; all must share one JSON type."""
    prev: Any = _UNSET
    for lst in lists:
        for v in lst:
            if prev is _UNSET:
                prev = v
                if isinstance(v, list):
                    raise PatchError(NO_LIST_OF_LISTS, 422)
            elif type(prev) is not type(v):
                shown = "[" + " ".join(gofmt.value_v(x) for x in lists) + "]"
                raise PatchError(f"list element types are not identical: {shown}")
    if prev is _UNSET:
        raise PatchError("no elements in any of the given slices")
    return prev


_UNSET = object()


def merge_slice(
    original: list[Any], patch: list[Any], schema: Meta, merge_key: str, is_delete_list: bool
) -> list[Any]:
    """``mergeSlice``: merge a list with merge strategy (or a deletion list)."""
    if not original and not patch:
        return original
    sample = _element_type(original, patch)
    is_map = isinstance(sample, dict)
    if not is_map:
        if is_delete_list:
            drop = {hkey(v) for v in patch}
            return [v for v in original if hkey(v) not in drop]
        merged = _dedupe_scalars(original + patch)
    else:
        if not merge_key:
            raise PatchError(f"cannot merge lists without merge key for {schema.name()}")
        original, patch = _special_elements(original, patch, merge_key)
        merged = _merge_without_special(original, patch, merge_key, schema)
    if merge_key:
        items, server_only = partition_maps(merged, patch, merge_key)
    else:
        items, server_only = partition_primitives(merged, patch)
    return normalize_order(items, server_only, patch, original, merge_key, is_map)


def _dedupe_scalars(s: list[Any]) -> list[Any]:
    s = list(s)
    length = len(s) - 1
    i = 0
    while i < length:
        j = i + 1
        while j <= length:
            if eq(s[i], s[j]):
                s[j] = s[length]
                s = s[:length]
                length -= 1
                j -= 1
            j += 1
        i += 1
    return s


def _special_elements(
    original: list[Any], patch: list[Any], merge_key: str
) -> tuple[list[Any], list[Any]]:
    """``mergeSliceWithSpecialElements``: ``$patch`` items (delete / replace)."""
    rest: list[Any] = []
    replace = False
    for v in patch:
        if MARKER not in v:
            rest.append(v)
            continue
        directive = v[MARKER]
        if directive == "delete":
            if merge_key not in v:
                raise no_merge_key(v, merge_key)
            original = _delete_matching(original, merge_key, v[merge_key])
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError("merging lists cannot yet be specified in the patch")
        else:
            raise PatchError(
                f"unknown patch type: {gofmt.value_v(directive)} in map: {gofmt.value_v(v)}"
            )
    if replace:
        return rest, []
    return original, rest


def _delete_matching(original: list[Any], key: str, value: Any) -> list[Any]:
    while True:
        i = find(original, key, value)
        if i < 0:
            return original
        original = original[:i] + original[i + 1 :]


def _merge_without_special(
    original: list[Any], patch: list[Any], merge_key: str, schema: Meta
) -> list[Any]:
    for v in patch:
        if merge_key not in v:
            raise no_merge_key(v, merge_key)
        i = find(original, merge_key, v[merge_key])
        if i >= 0:
            original[i] = merge_map(original[i], v, schema)
        else:
            original = [*original, v]
    return original
