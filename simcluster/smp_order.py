"""List ordering and item lookup for :mod:`simcluster.smp` (strategicpatch/patch.go).

``normalizeElementOrder`` / ``mergeSortedSlice`` / ``normalizeSliceOrder`` decide the order of a
merged list: items named by the patch (or by ``$setElementOrder``) in patch order, items
only the server had in their server order, interleaved as the Go code interleaves them. Go
compares ``interface{}`` values by dynamic type and value (``1`` is not ``1.0``), which
:func:`eq` and :func:`hkey` reproduce.
"""

from __future__ import annotations

from typing import Any

from simcluster import gofmt

MARKER = "$patch"


class PatchError(Exception):
    """A strategic merge patch failure; ``code`` is what the API server answers."""

    def __init__(self, message: str, code: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def go_type(v: Any) -> str:
    """``reflect.TypeOf`` of a decoded JSON value, as ``%s`` prints it."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "map[string]interface {}"
    if isinstance(v, list):
        return "[]interface {}"
    return "int64" if isinstance(v, int) else "float64"


def eq(a: Any, b: Any) -> bool:
    """Go ``==`` on ``interface{}`` scalars: same dynamic type and value."""
    return type(a) is type(b) and a == b


def hkey(v: Any) -> Any:
    return (type(v).__name__, v) if not isinstance(v, dict | list) else (id(v),)


def bad_arg_type(expected: str, actual: Any) -> PatchError:
    return PatchError(f"expected a {expected}, but received a {go_type(actual)}")


def no_merge_key(m: dict[str, Any], key: str) -> PatchError:
    return PatchError(f"map: {gofmt.value_v(m)} does not contain declared merge key: {key}")


def find(lst: list[Any], key: str, value: Any) -> int:
    for i, v in enumerate(lst):
        if not isinstance(v, dict):
            raise PatchError(f"value for key {i} is not a map")
        if key in v and eq(v[key], value):
            return i
    return -1


def partition_primitives(merged: list[Any], by: list[Any]) -> tuple[list[Any], list[Any]]:
    present = {hkey(v) for v in by}
    items = [v for v in merged if hkey(v) in present]
    return items, [v for v in merged if hkey(v) not in present]


def partition_maps(merged: list[Any], by: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    items: list[Any] = []
    server_only: list[Any] = []
    for v in merged:
        if not isinstance(v, dict):
            raise bad_arg_type("map[string]interface {}", v)
        if merge_key not in v:
            raise no_merge_key(v, merge_key)
        found = find(by, merge_key, v[merge_key]) >= 0
        (items if found else server_only).append(v)
    return items, server_only


def index(lst: list[Any], value: Any, merge_key: str, is_map: bool) -> int:
    def val(x: Any) -> Any:
        if is_map:
            return x.get(merge_key) if isinstance(x, dict) else None
        return x

    target = val(value)
    for i, v in enumerate(lst):
        if eq(target, val(v)):
            return i
    return -1


def split_deletes(lst: list[Any]) -> tuple[list[Any], list[Any]]:
    keep: list[Any] = []
    delete: list[Any] = []
    for v in lst:
        if not isinstance(v, dict):
            raise bad_arg_type("map[string]interface {}", v)
        (delete if v.get(MARKER) == "delete" else keep).append(v)
    return keep, delete


def normalize_slice_order(
    to_sort: list[Any], order: list[Any], merge_key: str, is_map: bool
) -> list[Any]:
    deletes: list[Any] = []
    if is_map:
        for lst in (to_sort, order):
            for item in lst:
                if not isinstance(item, dict):
                    raise bad_arg_type("map[string]interface {}", item)
                if merge_key not in item:
                    raise no_merge_key(item, merge_key)
        to_sort, deletes = split_deletes(to_sort)
    data = list(to_sort)

    def less(i: int, j: int) -> bool:
        ii = index(order, data[i], merge_key, is_map)
        if ii >= 0:
            ij = index(order, data[j], merge_key, is_map)
            if ij >= 0:
                return ii < ij
        return True

    go_stable_sort(data, less)
    return data + deletes


def normalize_order(
    items: list[Any],
    server_only: list[Any],
    patch_order: list[Any],
    server_order: list[Any],
    merge_key: str,
    is_map: bool,
) -> list[Any]:
    """``normalizeElementOrder`` + ``mergeSortedSlice``."""
    right = normalize_slice_order(items, patch_order, merge_key, is_map)
    left = normalize_slice_order(server_only, server_order, merge_key, is_map)
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li = index(server_order, left[i], merge_key, is_map)
            ri = index(server_order, right[j], merge_key, is_map)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def go_stable_sort(data: list[Any], less: Any) -> None:
    """Go's ``sort.SliceStable`` (insertion sort in blocks of 20, then SymMerge).

    Reproduced step by step because ``normalizeSliceOrder``'s ``less`` is not a strict
    weak order: the result depends on the algorithm, not just on stability.
    """

    def swap(i: int, j: int) -> None:
        data[i], data[j] = data[j], data[i]

    def insertion(a: int, b: int) -> None:
        for i in range(a + 1, b):
            j = i
            while j > a and less(j, j - 1):
                swap(j, j - 1)
                j -= 1

    def swap_range(a: int, b: int, n: int) -> None:
        for i in range(n):
            swap(a + i, b + i)

    def rotate(a: int, m: int, b: int) -> None:
        i, j = m - a, b - m
        while i != j:
            if i > j:
                swap_range(m - i, m, j)
                i -= j
            else:
                swap_range(m - i, m + j - i, i)
                j -= i
        swap_range(m - i, m, i)

    def sym_merge(a: int, m: int, b: int) -> None:
        if m - a == 1:
            i, j = m, b
            while i < j:
                h = (i + j) >> 1
                if less(h, a):
                    i = h + 1
                else:
                    j = h
            for k in range(a, i - 1):
                swap(k, k + 1)
            return
        if b - m == 1:
            i, j = a, m
            while i < j:
                h = (i + j) >> 1
                if not less(m, h):
                    i = h + 1
                else:
                    j = h
            for k in range(m, i, -1):
                swap(k, k - 1)
            return
        mid = (a + b) >> 1
        n = mid + m
        if m > mid:
            start, r = n - b, mid
        else:
            start, r = a, m
        p = n - 1
        while start < r:
            c = (start + r) >> 1
            if not less(p - c, c):
                start = c + 1
            else:
                r = c
        end = n - start
        if start < m < end:
            rotate(start, m, end)
        if a < start < mid:
            sym_merge(a, start, mid)
        if mid < end < b:
            sym_merge(mid, end, b)

    n = len(data)
    block = 20
    a, b = 0, block
    while b <= n:
        insertion(a, b)
        a, b = b, b + block
    insertion(a, n)
    while block < n:
        a, b = 0, 2 * block
        while b <= n:
            sym_merge(a, a + block, b)
            a, b = b, b + 2 * block
        m = a + block
        if m < n:
            sym_merge(a, m, n)
        block *= 2
