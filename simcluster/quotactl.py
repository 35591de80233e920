"""The quota controller (``status`` of ResourceQuotas) and ``spec.hard`` validation."""

from __future__ import annotations

import copy
from typing import Any

from simcluster import quota as q
from simcluster.errors import invalid
from simcluster.resources import RESOURCES, RT, ResourceType


class QuotaOps:
    """Quota status upkeep of :class:`~simcluster.cluster.SimCluster` (a mixin)."""

    # ---------------------------------------------------------------- quota
    def _quota_status(
        self, quota_obj: dict[str, Any], ns: str, previous: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if self.faults.config.quota_controller_paused:
            # A stalled quota controller: spec changes, status stays as it was.
            return copy.deepcopy((previous or {}).get("status") or {})
        hard = dict((quota_obj.get("spec") or {}).get("hard") or {})
        infos = [r.info for r in self.store.in_namespace("pods", ns) if r.info is not None]
        counts: dict[str, int] = {}
        for key in hard:
            rt = _count_resource(key)
            if rt is not None and rt.name != "pods":
                counts[key] = self.store.count(rt.name, ns)
        used = q.sum_usage(quota_obj, infos, counts)
        return {"hard": hard, "used": used}

    def refresh_quotas(self, ns: str) -> None:
        """The quota controller: recompute ``status`` of every quota in ``ns`` now."""
        with self.store.lock:
            for rec in list(self.store.in_namespace("resourcequotas", ns)):
                obj = rec.obj()
                st = self._quota_status(obj, ns, previous=obj)
                if st != obj.get("status"):
                    obj["status"] = st
                    self.store.put("resourcequotas", obj, "MODIFIED")


def validate_hard(obj: dict[str, Any]) -> dict[str, str]:
    hard = (obj.get("spec") or {}).get("hard") or {}
    out = {}
    name = (obj.get("metadata") or {}).get("name", "")
    for k, v in hard.items():
        try:
            qty = q.parse_quantity(v)
        except ValueError:
            raise invalid(
                "ResourceQuota",
                name,
                f"spec.hard[{k}]",
                v,
                "quantities must match the regular expression "
                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ) from None
        if qty.value < 0:
            raise invalid(
                "ResourceQuota", name, f"spec.hard[{k}]", v, "must be greater than or equal to 0"
            )
        out[k] = str(v) if isinstance(v, str) else str(qty)
    return out


def _count_resource(key: str) -> ResourceType | None:
    if key.startswith("count/"):
        name, _, group = key[6:].partition(".")
        for r in RESOURCES:
            if r.name == name and r.group == group:
                return r
        return None
    legacy = q.LEGACY_COUNT.get(key)
    return RT.get(legacy) if legacy else None
