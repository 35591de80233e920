"""Lists: pages joined from cached bytes, served from the watch cache or "etcd" as 1.32 does.

Which store answers follows ``staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go``
(v1.32) ``shouldDelegateList``: a list with a ``continue`` token, with ``limit`` and a
resourceVersion other than "0", or with ``resourceVersionMatch=Exact`` goes to etcd
(``staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go`` GetList); everything else is
served whole from the watch cache (``limit`` is ignored there: ``resourceVersion=0&limit=500``
returns every item and no ``continue``):

- cache, resourceVersion "" : a consistent read (the cache catches up, then lists);
- cache, "0": whatever the cache holds, at the type's cache resourceVersion;
- cache, N: waits up to 3 s for the cache to reach N (``watch_cache.go`` blockTimeout),
  else 504 ``Too large resource version`` with ``Retry-After: 1``;
- etcd, latest (no resourceVersion, or N with ``NotOlderThan``: then 504 without
  Retry-After when N is ahead); etcd at N (``Exact``, or N with ``limit`` and no match):
  the list as of N, 410 ``The resourceVersion for the provided list is too old.`` when the
  history no longer reaches N, 500 ``etcdserver: mvcc: required revision is a future
  revision`` when N is ahead;
- etcd, continue: the page as of the token's resourceVersion (every page of a chain is a
  snapshot at the first page's version; ``remainingItemCount`` as of then). When the history
  no longer reaches it (``continue_ttl`` since the first page, the fault
  ``expire_continue``, or trimmed history) the answer is 410 with the
  ``inconsistentContinue`` message and ``metadata.continue`` holding a token with
  ``rv: -1`` that continues at the latest version (handleCompactedErrorForPaging).

A page is a join of cached bytes; the versions as of an older resourceVersion come from
the store's history (:meth:`simcluster.store.Store.state_at`), O(writes since then).
"""

from __future__ import annotations

import bisect
import json
import time
from typing import Any

from simcluster.listopts import (
    EXPIRED_LIST,
    FUTURE_REVISION,
    INCONSISTENT_CONTINUE,
    NOT_OLDER,
    ListOptions,
    bad_request,
    decode_continue,
    encode_continue,
    expired,
    internal,
    parse_options,
    rv_error,
    too_large,
)
from simcluster.resources import ResourceType, conversion_name
from simcluster.selectors import parse_field_selector, parse_label_selector
from simcluster.store import Key, Record, order_key

# watch_cache.go: how long a read waits for the cache to reach a requested resourceVersion
BLOCK_TIMEOUT_S = 3.0


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class ListOps:
    """List requests of :class:`~simcluster.cluster.SimCluster` (a mixin)."""

    def op_list(self, rt: ResourceType, ns: str | None, params: dict[str, str], path: str) -> bytes:
        """One list page as the API server answers it (see the module docstring)."""
        opts = parse_options(params, watch=False)
        lsel = parse_label_selector(params.get("labelSelector"))
        fsel = parse_field_selector(params.get("fieldSelector"), rt.fields, conversion_name(rt))
        if _from_etcd(opts):
            items, meta = self._list_etcd(rt, ns, opts, lsel, fsel, path)
        else:
            items, meta = self._list_cache(rt, ns, opts, lsel, fsel)
        head = (
            b'{"kind":"'
            + rt.kind.encode()
            + b'List","apiVersion":"'
            + rt.api_version.encode()
            + b'","metadata":'
            + _dumps(meta)
            + b',"items":['
        )
        return head + b",".join(items) + b"]}"

    def list_objects(
        self, rt: ResourceType, ns: str | None, params: dict[str, str], path: str
    ) -> dict[str, Any]:
        """Decoded list (used for Table output)."""
        return json.loads(self.op_list(rt, ns, params, path))

    # ------------------------------------------------------------ watch cache
    def _list_cache(
        self, rt: ResourceType, ns: str | None, opts: ListOptions, lsel: Any, fsel: Any
    ) -> tuple[list[bytes], dict[str, Any]]:
        err = rv_error(opts.resource_version)
        if err:  # the delegator's storage.ValidateListOptions comes first (v0.36
            # staging/src/k8s.io/apiserver/pkg/storage/cacher/delegator.go, interfaces.go)
            raise bad_request(f"invalid resource version: {err}")
        s = self.store
        with s.lock:
            if opts.resource_version == "":
                list_rv = s.progress(rt.name)
            elif opts.rv == 0:
                list_rv = s.cache_rv(rt.name)
            else:
                list_rv = self._wait_fresh(rt.name, opts.rv)
            keys, lo, hi = s.key_range(rt.name, ns)
            objs = s.objects[rt.name]
            items: list[bytes] = []
            if lsel is None and fsel is None:
                items = [objs[k].raw for k in keys[lo:hi]]
            else:
                for k in keys[lo:hi]:
                    rec = objs[k]
                    if (lsel is None or lsel(rec.labels)) and (fsel is None or fsel(rec.fields)):
                        items.append(rec.raw)
        return items, {"resourceVersion": str(list_rv)}

    def _wait_fresh(self, resource: str, rv: int) -> int:
        """``waitUntilFreshAndBlock``: the cache reaches ``rv`` (progress notify) or 504."""
        s = self.store
        if rv <= s.cache_rv(resource):
            return s.cache_rv(resource)
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while rv > s.rv and not s.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                raise too_large(rv, s.cache_rv(resource), 1)
            s.cond.wait(timeout=left)
        return s.progress(resource)

    # ------------------------------------------------------------------- etcd
    def _list_etcd(
        self,
        rt: ResourceType,
        ns: str | None,
        opts: ListOptions,
        lsel: Any,
        fsel: Any,
        path: str,
    ) -> tuple[list[bytes], dict[str, Any]]:
        err = rv_error(opts.resource_version)
        if err:
            raise bad_request(f"invalid resource version: {err}")
        s = self.store
        token = decode_continue(opts.continue_token) if opts.continue_token else None
        if token is not None and opts.resource_version not in ("", "0"):
            raise bad_request("specifying resource version is not allowed when using continue")
        prefix = f"{ns}/" if ns and rt.namespaced else ""
        with s.lock:
            with_rv = 0
            issued: float | None = None
            if token is not None:
                with_rv = max(token.rv, 0)
                issued = token.issued if with_rv else None
            elif opts.rv and opts.match != NOT_OLDER:
                with_rv = opts.rv  # Exact, or the legacy "N with limit" exact read
            if opts.rv and opts.match == NOT_OLDER and opts.rv > s.rv:
                raise too_large(opts.rv, s.rv, 0)  # validateMinimumResourceVersion
            if with_rv > s.rv:
                raise internal(FUTURE_REVISION)
            overlay: dict[Key, Record | None] | None = None
            if with_rv and with_rv < s.rv:
                overlay = s.state_at(rt.name, with_rv)
            compacted = bool(with_rv) and overlay is None and with_rv < s.rv
            if token is not None:
                aged = issued is not None and time.time() - issued > self.continue_ttl
                if self.faults.continue_expired(path) or (with_rv and aged):
                    compacted = True
            if compacted:
                if token is not None:
                    raise expired(INCONSISTENT_CONTINUE, encode_continue(token.start, -1))
                raise expired(EXPIRED_LIST)
            list_rv = with_rv or s.rv
            if issued is None:
                issued = time.time()
            start = prefix + token.start if token is not None else None
            items, last, more, remaining = _page(
                s, rt.name, ns, start, overlay or {}, opts.limit, lsel, fsel
            )
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if more and last is not None:
            rel = order_key(last)[len(prefix) :]
            meta["continue"] = encode_continue(rel + "\x00", list_rv, issued)
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        return items, meta


def _from_etcd(opts: ListOptions) -> bool:
    """cacher.go ``shouldDelegateList`` with ConsistentListFromCache on (v1.32)."""
    return (
        bool(opts.continue_token)
        or (opts.limit > 0 and opts.resource_version != "0")
        or (opts.match not in ("", NOT_OLDER))
    )


def _page(
    s: Any,
    resource: str,
    ns: str | None,
    start: str | None,
    overlay: dict[Key, Record | None],
    limit: int,
    lsel: Any,
    fsel: Any,
) -> tuple[list[bytes], Key | None, bool, int | None]:
    """Items from ``start`` on as of the overlay's version: (raws, last key, more, remaining).

    ``more`` is etcd's "there are keys after the last one returned" (regardless of
    selectors); ``remaining`` is the number of them, only without selectors.
    """
    keys, lo, hi = s.key_range(resource, ns)
    objs = s.objects[resource]
    i = lo if start is None else max(lo, bisect.bisect_left(keys, start, lo, hi, key=order_key))
    filtered = lsel is not None or fsel is not None
    items: list[bytes] = []
    last: Key | None = None
    if not overlay and not filtered:  # the hot path: one slice of cached bytes
        end = min(hi, i + limit) if limit else hi
        items = [objs[k].raw for k in keys[i:end]]
        if not limit or end - i < limit or end >= hi:
            return items, keys[end - 1] if end > i else None, False, None
        return items, keys[end - 1], True, hi - end
    if not overlay:
        want = limit or hi
        n = 0
        while i < hi:
            k = keys[i]
            i += 1
            rec = objs[k]
            if (lsel is None or lsel(rec.labels)) and (fsel is None or fsel(rec.fields)):
                items.append(rec.raw)
                last = k
                n += 1
                if n >= want:
                    break
        return items, last, bool(limit) and n >= limit and i < hi, None
    # keys that existed then but are gone now, merged in etcd order with today's keys
    gone = sorted((k for k, r in overlay.items() if r is not None and k not in objs), key=order_key)
    if ns:
        gone = [k for k in gone if k[0] == ns]
    j = 0 if start is None else bisect.bisect_left(gone, start, key=order_key)
    full = False
    while i < hi or j < len(gone):
        if j < len(gone) and (i >= hi or order_key(gone[j]) < order_key(keys[i])):
            k = gone[j]
            j += 1
            rec = overlay[k]
        else:
            k = keys[i]
            i += 1
            rec = overlay[k] if k in overlay else objs[k]
        if rec is None:  # created after the list's resourceVersion
            continue
        if full:  # a key existed then after the last item returned: etcd says "more"
            if filtered:
                return items, last, True, None
            return items, last, True, _remaining(overlay, objs, ns, keys, i, hi, len(gone) - j)
        if filtered and not (
            (lsel is None or lsel(rec.labels)) and (fsel is None or fsel(rec.fields))
        ):
            continue
        items.append(rec.raw)
        last = k
        if limit and len(items) >= limit:
            full = True
    return items, last, False, None


def _remaining(
    overlay: dict[Key, Record | None],
    objs: dict[Key, Record],
    ns: str | None,
    keys: list[Key],
    i: int,
    hi: int,
    gone_left: int,
) -> int:
    """Keys that existed at the list's version after the page (one was already consumed)."""
    count = 1 + (hi - i) + gone_left
    if i < hi:
        first = order_key(keys[i])
        for k, rec in overlay.items():
            if rec is None and k in objs and (not ns or k[0] == ns) and order_key(k) >= first:
                count -= 1  # exists now, did not then
    return count
