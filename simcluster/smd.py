"""Field sets, comparison and merging of typed objects, as sigs.k8s.io/structured-merge-diff.

Server-side apply (:mod:`simcluster.ssa`) needs the v4 library's semantics
(``typed/tofieldset.go``, ``typed/compare.go`` with the rules of ``typed/typed.go``
Compare, ``typed/merge.go``, ``typed/remove.go``, ``fieldpath/set.go``
EnsureNamedFieldsAreMembers, ``fieldpath/serialize.go``, ``fieldpath/pathelement.go``):

- a field set is a set of paths; an element is a struct field or map key (``str``), an
  associative-list item (``("k", '{"name":"main"}')``), a set-list value
  (``("v", '"a"')``); leaves, ``null``, empty maps, map keys and list items are members;
  a struct field that is a non-empty map is not (``labels: {}`` owns ``.metadata.labels``,
  ``labels: {a: x}`` owns only ``.metadata.labels.a``);
- lists follow their type's ``+listType`` (``map`` merged by ``+listMapKey``, ``set``,
  else ``atomic``, replaced whole) and maps/structs their ``+mapType``/``+structType``
  (types from :mod:`simcluster.schema`, built from the client models plus the Go markers);
- FieldsV1 encoding: ``f:<field>``, ``k:<json>``, ``v:<json>``, and ``.`` for a node that
  is itself a member and has children.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

Element = str | tuple[str, str]
Path = tuple[Element, ...]
MISSING: Any = object()


class TypeRef:
    """A position in a type: struct (schema definition), map, list or leaf."""

    __slots__ = ("atomic", "defn", "item", "keys", "kind", "list_type")

    def __init__(
        self,
        kind: str,
        defn: Any = None,
        item: TypeRef | None = None,
        list_type: str = "atomic",
        keys: tuple[str, ...] = (),
        atomic: bool = False,
    ) -> None:
        self.kind = kind  # "struct" | "map" | "list" | "leaf" | "any"
        self.defn = defn
        self.item = item
        self.list_type = list_type
        self.keys = keys
        self.atomic = atomic

    def field(self, name: str) -> tuple[TypeRef, bool]:
        """The type of child ``name`` and whether it is a declared (named) struct field."""
        if self.kind == "struct":
            f = self.defn.fields.get(name)
            if f is None:
                return ANY, False
            return _from_field(f), True
        if self.kind == "map" and self.item is not None:
            return self.item, False
        return ANY, False

    def granular_dict(self) -> bool:
        return self.kind in ("struct", "map", "any") and not self.atomic

    def granular_list(self) -> bool:
        return self.kind == "list" and self.list_type in ("map", "set")


ANY = TypeRef("any")
LEAF = TypeRef("leaf")


def _from_type(
    t: Any, list_type: str = "", keys: tuple[str, ...] = (), map_type: str = ""
) -> TypeRef:
    from simcluster import schema

    if t.kind == "scalar":
        return LEAF
    if t.kind == "ref":
        try:
            d = schema.definition(t.name)
        except KeyError:
            return ANY
        return TypeRef("struct", d, atomic=bool(d.atomic))
    if t.kind == "map":
        return TypeRef("map", item=_from_type(t.item), atomic=map_type == "atomic")
    if t.kind == "list":
        return TypeRef("list", item=_from_type(t.item), list_type=list_type or "atomic", keys=keys)
    return ANY


def _from_field(f: Any) -> TypeRef:
    lt = f.list_type
    keys = tuple(f.list_keys)
    if not lt and f.type.kind == "list" and "merge" in f.patch_strategy:
        # kube-openapi schemaconv: patchStrategy=merge without +listType
        lt, keys = ("map", (f.merge_key,)) if f.merge_key else ("set", ())
    return _from_type(f.type, lt, keys, f.map_type)


_ROOTS: dict[tuple[str, str], TypeRef] = {}


def root_type(api_version: str, kind: str) -> TypeRef:
    """The type of a served kind (``ANY`` when the schema does not know it)."""
    key = (api_version, kind)
    t = _ROOTS.get(key)
    if t is None:
        group, _, version = api_version.rpartition("/")
        try:
            from simcluster import schema

            d = schema.for_kind(group, version, kind)
        except Exception:  # the schema module is optional here: fall back to untyped
            d = None
        t = TypeRef("struct", d) if d is not None else ANY
        _ROOTS[key] = t
    return t


# ------------------------------------------------------------------ elements
def _canon(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def item_element(t: TypeRef, item: Any) -> Element | None:
    """``listItemToPathElement``: the key or value element of a list item (None: no key)."""
    if t.list_type == "set":
        return ("v", _canon(item))
    if not isinstance(item, dict):
        return None
    key: dict[str, Any] = {}
    for k in t.keys:
        if k in item and item[k] is not None:
            key[k] = item[k]
        elif k == "protocol":  # the schema default of every "protocol" list key
            key[k] = "TCP"
        else:
            return None
    return ("k", _canon(key))


def _elem_order(e: Element) -> tuple[int, str]:
    if isinstance(e, str):
        return (0, e)
    return (1 if e[0] == "k" else 2, e[1])


def path_order(p: Path) -> tuple[tuple[int, int, str], ...]:
    """``Set.Iterate`` order: at each level the members first, then the children, sorted."""
    return tuple((0 if i == len(p) - 1 else 1, *_elem_order(e)) for i, e in enumerate(p))


def path_string(p: Path) -> str:
    """``fieldpath.Path.String()``: ``.spec.containers[name="main"].image``."""
    out = []
    for e in p:
        if isinstance(e, str):
            out.append("." + e)
        elif e[0] == "k":
            fields = json.loads(e[1])
            out.append("[" + ",".join(f"{k}={_go_value(v)}" for k, v in fields.items()) + "]")
        else:
            out.append(f"[={_go_value(json.loads(e[1]))}]")
    return "".join(out)


def _go_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    return json.dumps(v, separators=(",", ":"))


# ----------------------------------------------------------------- field sets
def to_field_set(obj: Any, t: TypeRef) -> set[Path]:
    """``TypedValue.ToFieldSet``: every leaf, item and key mentioned in ``obj``."""
    out: set[Path] = set()
    _walk(obj, t, (), out)
    return out


def _walk(v: Any, t: TypeRef, path: Path, out: set[Path]) -> None:
    if isinstance(v, dict):
        if not t.granular_dict():
            out.add(path)
            return
        for k, cv in v.items():
            ct, named = t.field(k)
            p = (*path, k)
            if cv is None or (isinstance(cv, dict) and not cv) or not named:
                out.add(p)
            _walk(cv, ct, p, out)
    elif isinstance(v, list):
        if not t.granular_list() or t.item is None:
            out.add(path)
            return
        for item in v:
            e = item_element(t, item)
            if e is None:  # an item without its key: the list counts as one leaf
                out.add(path)
                return
            p = (*path, e)
            out.add(p)
            _walk(item, t.item, p, out)
    elif path:
        out.add(path)


def ensure_named(paths: Iterable[Path], t: TypeRef) -> set[Path]:
    """``Set.EnsureNamedFieldsAreMembers``: add every ancestor that is a named struct field."""
    out = set(paths)
    for p in list(out):
        cur = t
        for i, e in enumerate(p[:-1]):
            if isinstance(e, str):
                cur, named = cur.field(e)
                if named:
                    out.add(p[: i + 1])
            else:
                cur = cur.item or ANY
    return out


# ----------------------------------------------------------------- comparison
class Comparison:
    """``typed.Comparison``: paths added, modified and removed from lhs to rhs."""

    __slots__ = ("added", "modified", "removed")

    def __init__(self) -> None:
        self.added: set[Path] = set()
        self.modified: set[Path] = set()
        self.removed: set[Path] = set()


def compare(lhs: Any, rhs: Any, t: TypeRef) -> Comparison:
    """``TypedValue.Compare`` (the merge walk with the leaf and post-item rules)."""
    c = Comparison()
    _cmp(lhs, rhs, t, (), c)
    return c


def _empty(v: Any, kind: type) -> bool:
    return v is MISSING or v is None or (isinstance(v, kind) and not v)


def _leaf(lhs: Any, rhs: Any, path: Path, c: Comparison) -> None:
    if not path:
        return
    if lhs is MISSING:
        c.added.add(path)
    elif rhs is MISSING:
        c.removed.add(path)
    elif lhs != rhs:
        c.modified.add(path)


def _cmp(lhs: Any, rhs: Any, t: TypeRef, path: Path, c: Comparison) -> None:
    if lhs is MISSING and rhs is MISSING:
        return
    ref = rhs if rhs is not MISSING and rhs is not None else lhs
    if isinstance(ref, dict) and t.granular_dict():
        if (_empty(lhs, dict) and _empty(rhs, dict)) or not _same_kind(lhs, rhs, dict):
            _leaf(lhs, rhs, path, c)
            return
        lm = lhs if isinstance(lhs, dict) else {}
        rm = rhs if isinstance(rhs, dict) else {}
        for k in {**lm, **rm}:
            ct, _ = t.field(k)
            _cmp(lm.get(k, MISSING), rm.get(k, MISSING), ct, (*path, k), c)
    elif isinstance(ref, list) and t.granular_list() and t.item is not None:
        if (_empty(lhs, list) and _empty(rhs, list)) or not _same_kind(lhs, rhs, list):
            _leaf(lhs, rhs, path, c)
            return
        li, ri = _index(t, lhs), _index(t, rhs)
        if li is None or ri is None:
            _leaf(lhs, rhs, path, c)
            return
        for e in {**li, **ri}:
            _cmp(li.get(e, MISSING), ri.get(e, MISSING), t.item, (*path, e), c)
    else:
        _leaf(lhs, rhs, path, c)
        return
    if path:  # postItemHook: a whole map or list item appeared or went away
        if lhs is MISSING:
            c.added.add(path)
        elif rhs is MISSING:
            c.removed.add(path)


def _same_kind(lhs: Any, rhs: Any, kind: type) -> bool:
    return all(v is MISSING or v is None or isinstance(v, kind) for v in (lhs, rhs))


def _index(t: TypeRef, v: Any) -> dict[Element, Any] | None:
    out: dict[Element, Any] = {}
    for item in v if isinstance(v, list) else ():
        e = item_element(t, item)
        if e is None:
            return None
        out.setdefault(e, item)  # repeated items: the first one counts
    return out


# -------------------------------------------------------------------- merging
def merge(lhs: Any, rhs: Any, t: TypeRef) -> Any:
    """``TypedValue.Merge``: ``rhs`` (an applied configuration) over ``lhs`` (live)."""
    if rhs is MISSING:
        return lhs
    if lhs is MISSING or lhs is None or rhs is None:
        return _clean(copy.deepcopy(rhs))
    if isinstance(rhs, dict) and isinstance(lhs, dict) and t.granular_dict():
        if not rhs and not lhs:
            return {}
        out: dict[str, Any] = {}
        for k, lv in lhs.items():
            ct, _ = t.field(k)
            mv = merge(lv, rhs.get(k, MISSING), ct)
            if mv is not None and not (mv == {} and ct.kind == "map"):
                out[k] = mv
        for k, rv in rhs.items():
            if k not in lhs and rv is not None:
                ct, _ = t.field(k)
                if not (rv == {} and ct.kind == "map"):  # Go: an empty map is omitted
                    out[k] = _clean(copy.deepcopy(rv))
        return out
    if isinstance(rhs, list) and isinstance(lhs, list) and t.granular_list() and t.item:
        merged = _merge_list(lhs, rhs, t)
        if merged is not None:
            return merged
    return _clean(copy.deepcopy(rhs))


def _clean(v: Any) -> Any:
    """Drop ``null`` map values, as the round trip through the Go types does."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def _merge_list(lhs: list[Any], rhs: list[Any], t: TypeRef) -> list[Any] | None:
    """The merge walker's list ordering (``visitListItems``)."""
    lmap, rmap = _index(t, lhs), _index(t, rhs)
    if lmap is None or rmap is None:
        return None
    lorder, rorder = list(lmap), list(rmap)
    shared = [e for e in rorder if e in lmap]
    next_shared = shared.pop(0) if shared else None
    out: list[Any] = []
    li = ri = 0
    while li < len(lorder) or ri < len(rorder):
        if li < len(lorder) and ri < len(rorder):
            e = lorder[li]
            if e == rorder[ri]:
                out.append(merge(lmap[e], rmap[e], t.item))  # type: ignore[arg-type]
                li += 1
                ri += 1
                next_shared = shared.pop(0) if shared else None
                continue
            if e in rmap and next_shared is not None and next_shared != e:
                li += 1
                continue
        if li < len(lorder) and lorder[li] not in rmap:
            out.append(lmap[lorder[li]])
            li += 1
            continue
        if ri < len(rorder):
            e = rorder[ri]
            out.append(merge(lmap.get(e, MISSING), rmap[e], t.item))  # type: ignore[arg-type]
            ri += 1
            if next_shared is not None and next_shared == e:
                next_shared = shared.pop(0) if shared else None
    return out


def remove_items(obj: dict[str, Any], paths: Iterable[Path], t: TypeRef) -> None:
    """``TypedValue.RemoveItems``: delete each path's field, key or list item (in place)."""
    for p in sorted(paths, key=len):
        _remove(obj, p, t)


def _remove(node: Any, p: Path, t: TypeRef) -> None:
    for i, e in enumerate(p):
        last = i == len(p) - 1
        if isinstance(e, str):
            if not isinstance(node, dict) or e not in node:
                return
            if last:
                del node[e]
                return
            t, _ = t.field(e)
            node = node[e]
        else:
            if not isinstance(node, list):
                return
            idx = next((j for j, it in enumerate(node) if item_element(t, it) == e), None)
            if idx is None:
                return
            if last:
                del node[idx]
                return
            node = node[idx]
            t = t.item or ANY


def filter_paths(paths: Iterable[Path], keep: str = "", drop: str = "") -> set[Path]:
    """Keep only paths under top-level field ``keep``, or drop those under ``drop``."""
    if keep:
        return {p for p in paths if p and p[0] == keep}
    if drop:
        return {p for p in paths if not p or p[0] != drop}
    return set(paths)


# ------------------------------------------------------------------ FieldsV1
def fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    """``SetToFields``: the ``fieldsV1`` tree, with ``.`` for members that have children."""
    members = set(paths)
    root: dict[Element, Any] = {}
    for p in members:
        node = root
        for e in p:
            node = node.setdefault(e, {})
    return _emit(root, (), members)


def _emit(tree: dict[Element, Any], prefix: Path, members: set[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if prefix and prefix in members and tree:
        out["."] = {}
    for e in sorted(tree, key=_elem_order):
        name = ("f:" + e) if isinstance(e, str) else f"{e[0]}:{e[1]}"
        out[name] = _emit(tree[e], (*prefix, e), members)
    return out


def parse_fields_v1(fv: Any, prefix: Path = ()) -> set[Path]:
    """``FieldsToSet``: the paths of a ``fieldsV1`` tree."""
    out: set[Path] = set()
    if not isinstance(fv, dict):
        return out
    for k, v in fv.items():
        if k == ".":
            if prefix:
                out.add(prefix)
            continue
        if k.startswith("f:"):
            e: Element = k[2:]
        elif k[:2] in ("k:", "v:"):
            try:
                e = (k[0], _canon(json.loads(k[2:])))
            except ValueError:
                continue
        else:
            continue
        p = (*prefix, e)
        if isinstance(v, dict) and v:
            out |= parse_fields_v1(v, p)
        else:
            out.add(p)
    return out
