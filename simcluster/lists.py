"""Lists: pages joined from cached bytes, ``limit``/``continue`` pagination."""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import Any

from simcluster.errors import ApiError
from simcluster.resources import ResourceType
from simcluster.selectors import parse_field_selector, parse_label_selector

EXPIRED_MSG = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class ListOps:
    """List requests of :class:`~simcluster.cluster.SimCluster` (a mixin)."""

    def op_list(self, rt: ResourceType, ns: str | None, params: dict[str, str], path: str) -> bytes:
        """One list page: a join of cached bytes, with ``limit``/``continue`` pagination."""
        limit = _int_param(params, "limit")
        lsel = parse_label_selector(params.get("labelSelector"))
        fsel = parse_field_selector(params.get("fieldSelector"), rt.fields)
        token = params.get("continue") or ""
        s = self.store
        with s.lock:
            start_key: tuple[str, str] | None = None
            if token:
                list_rv, start_key = self._decode_continue(token, path)
            else:
                list_rv = s.rv
            keys, lo, hi = s.key_range(rt.name, ns)
            i = lo
            if start_key is not None:
                import bisect

                i = max(lo, bisect.bisect_right(keys, start_key, lo, hi))
            objs = s.objects[rt.name]
            items: list[bytes] = []
            while i < hi:
                rec = objs[keys[i]]
                i += 1
                if lsel is not None and not lsel(rec.labels):
                    continue
                if fsel is not None and not fsel(rec.fields):
                    continue
                items.append(rec.raw)
                if limit and len(items) >= limit:
                    break
            meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
            if limit and len(items) >= limit and i < hi:
                meta["continue"] = self._encode_continue(list_rv, keys[i - 1])
                if lsel is None and fsel is None:
                    meta["remainingItemCount"] = hi - i
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

    def _encode_continue(self, rv: int, key: tuple[str, str]) -> str:
        payload = {"v": "meta.k8s.io/v1", "rv": rv, "start": list(key), "t": round(time.time(), 3)}
        return base64.urlsafe_b64encode(_dumps(payload)).decode().rstrip("=")

    def _decode_continue(self, token: str, path: str) -> tuple[int, tuple[str, str]]:
        try:
            pad = "=" * (-len(token) % 4)
            data = json.loads(base64.urlsafe_b64decode(token + pad))
            rv = int(data["rv"])
            start = (str(data["start"][0]), str(data["start"][1]))
            issued = float(data["t"])
        except (ValueError, KeyError, TypeError, IndexError, binascii.Error) as exc:
            raise ApiError(400, f"continue key is not valid: {exc}", "BadRequest") from exc
        if self.faults.continue_expired(path) or time.time() - issued > self.continue_ttl:
            raise ApiError(410, EXPIRED_MSG, "Expired")
        return rv, start


def _int_param(params: dict[str, str], key: str) -> int:
    val = params.get(key)
    if not val:
        return 0
    try:
        n = int(val)
    except ValueError as exc:
        raise ApiError(400, f"invalid {key} parameter {val!r}", "BadRequest") from exc
    return max(0, n)
