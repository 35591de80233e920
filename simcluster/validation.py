"""Object validation as the API server does it (pkg/apis/core/validation, apimachinery).

Called by :mod:`simcluster.crud`:

* :func:`normalize` right after a body is decoded (create, and the merged object of an
  update, patch or apply): the decode step of the real server. Quantities are parsed with
  the real grammar and re-encoded in canonical form (``1000m`` -> ``1``), Secret
  ``stringData`` is folded into ``data``, fields of disabled features are dropped. A value
  that cannot be decoded is a 400 ``BadRequest``
  (``Pod in version "v1" cannot be handled as a Pod: quantities must match ...``), as
  ``transformDecodeError`` in ``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go``.
* :func:`validate_create` after defaulting and before admission: the type's ``Validate``
  (``pkg/registry/<group>/<type>/strategy.go``), then, if that passed, the generic ObjectMeta
  step of ``rest.BeforeCreate`` (``staging/src/k8s.io/apiserver/pkg/registry/rest/create.go``).
* :func:`validate_update` before an update is stored (``sub`` = ``"status"`` for the status
  subresource): ``validateCommonFields`` plus the strategy's ``ValidateUpdate`` as
  ``rest.BeforeUpdate`` (``.../registry/rest/update.go``) does.

Every failure is one 422 ``Invalid`` carrying all field errors
(:func:`simcluster.fielderrors.invalid_error`). Types added by others (RBAC, Leases, ...)
get the generic checks and may plug their own rules in with :func:`register`.
"""

from __future__ import annotations

import base64
import binascii
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from simcluster import context, workloads
from simcluster import validation_apps as vapps
from simcluster import validation_ingress as ving
from simcluster import validation_jobs as vjobs
from simcluster import validation_pod as vp
from simcluster import validation_policy as vpol
from simcluster import validation_types as vt
from simcluster.errors import ApiError
from simcluster.fielderrors import FieldError, invalid_error, key
from simcluster.quantity import GoQuantity, QuantityError, decoded, parse_go, quantity_input_text
from simcluster.resources import ResourceType
from simcluster.validation_meta import generic_object_meta, validate_object_meta_update

CreateRule = Callable[[dict[str, Any], Callable[[str, Any], GoQuantity]], list[FieldError]]
UpdateRule = Callable[
    [dict[str, Any], dict[str, Any], Callable[[str, Any], GoQuantity]], list[FieldError]
]


@dataclass
class Rules:
    """The strategy's ``Validate``, ``ValidateUpdate`` and status ``ValidateUpdate``."""

    create: CreateRule | None = None
    update: UpdateRule | None = None
    status: UpdateRule | None = None


_RULES: dict[str, Rules] = {
    "pods": Rules(
        lambda o, q: vp.validate_pod_create(o, q),
        lambda n, o, q: vp.validate_pod_update(n, o, q),
        lambda n, o, q: vp.validate_pod_status_update(n, o),
    ),
    "namespaces": Rules(vt.namespace_create, vt.namespace_update, vt.namespace_status),
    "nodes": Rules(vt.node_create, vt.node_update, vt.node_status_update),
    "resourcequotas": Rules(vt.quota_create, vt.quota_update, vt.quota_status),
    "configmaps": Rules(vt.configmap_create, vt.configmap_update),
    "secrets": Rules(vt.secret_create, vt.secret_update),
    "serviceaccounts": Rules(vt.serviceaccount_create, vt.serviceaccount_update),
    "services": Rules(vpol.service_create, vpol.service_update, lambda n, o, q: []),
    "limitranges": Rules(vt.limitrange_create, vt.limitrange_update),
    "events": Rules(vpol.event_create, vpol.event_update),
    "poddisruptionbudgets": Rules(vpol.pdb_create, vpol.pdb_update, vpol.pdb_status),
    "priorityclasses": Rules(vpol.priorityclass_create, vpol.priorityclass_update),
    # workload types (validation_apps.py, validation_jobs.py, validation_ingress.py)
    "daemonsets": Rules(vapps.daemonset_create, vapps.daemonset_update, vapps.daemonset_status),
    "deployments": Rules(vapps.deployment_create, vapps.deployment_update, vapps.deployment_status),
    "replicasets": Rules(vapps.replicaset_create, vapps.replicaset_update, vapps.replicaset_status),
    "statefulsets": Rules(
        vjobs.statefulset_create, vjobs.statefulset_update, vapps.statefulset_status
    ),
    "jobs": Rules(vjobs.job_create, vjobs.job_update, vjobs.job_status),
    "cronjobs": Rules(vjobs.cronjob_create, vjobs.cronjob_update, lambda n, o, q: []),
    "ingresses": Rules(ving.ingress_create, ving.ingress_update, lambda n, o, q: []),
    "ingressclasses": Rules(ving.ingressclass_create, ving.ingressclass_update),
}


def register(
    resource: str,
    create: CreateRule | None = None,
    update: UpdateRule | None = None,
    status: UpdateRule | None = None,
) -> None:
    """Plug in the type-specific rules of a served resource (e.g. ``roles``, ``leases``).

    Each rule returns a list of :class:`~simcluster.fielderrors.FieldError`; the generic
    ObjectMeta checks always run as well.
    """
    _RULES[resource] = Rules(create, update, status)


# ------------------------------------------------------------ decode step
_local = threading.local()
_PODS_CONTAINERS = ("containers", "initContainers", "ephemeralContainers")
_STATUS_CONTAINERS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
_LIMIT_PARTS = ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio")


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _slots(resource: str, obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """Every Quantity field of a served type: (field path, containing dict, key)."""

    def each(path: str, m: Any) -> Iterator[tuple[str, dict[str, Any], str]]:
        if isinstance(m, dict):
            for k in list(m):
                yield key(path, k), m, k

    def pod_spec(spec: dict[str, Any], p: str) -> Iterator[tuple[str, dict[str, Any], str]]:
        for field in _PODS_CONTAINERS:
            for i, c in enumerate(_l(spec.get(field))):
                res = _d(_d(c).get("resources"))
                for part in ("limits", "requests"):
                    yield from each(f"{p}.{field}[{i}].resources.{part}", res.get(part))
        yield from each(f"{p}.overhead.limits", spec.get("overhead"))
        for i, v in enumerate(_l(spec.get("volumes"))):
            ed = _d(v).get("emptyDir")
            if isinstance(ed, dict) and "sizeLimit" in ed:
                yield f"{p}.volumes[{i}].emptyDir.sizeLimit", ed, "sizeLimit"

    if resource in workloads.WORKLOADS:  # pod templates (workloads.py)
        spec = _d(obj.get("spec"))
        tpl, p = _d(spec.get("template")), "spec.template.spec"
        if resource == "cronjobs":
            tpl = _d(_d(_d(spec.get("jobTemplate")).get("spec")).get("template"))
            p = "spec.jobTemplate.spec.template.spec"
        yield from pod_spec(_d(tpl.get("spec")), p)
    elif resource == "pods":
        spec, status = _d(obj.get("spec")), _d(obj.get("status"))
        yield from pod_spec(spec, "spec")
        for field in _STATUS_CONTAINERS:
            for i, cs in enumerate(_l(status.get(field))):
                cs = _d(cs)
                yield from each(
                    f"status.{field}[{i}].allocatedResources", cs.get("allocatedResources")
                )
                for part in ("limits", "requests"):
                    yield from each(
                        f"status.{field}[{i}].resources.{part}", _d(cs.get("resources")).get(part)
                    )
    elif resource == "resourcequotas":
        yield from each("spec.hard", _d(obj.get("spec")).get("hard"))
        for part in ("hard", "used"):
            yield from each(f"status.{part}", _d(obj.get("status")).get(part))
    elif resource == "nodes":
        for part in ("capacity", "allocatable"):
            yield from each(f"status.{part}", _d(obj.get("status")).get(part))
    elif resource == "limitranges":
        for i, lim in enumerate(_l(_d(obj.get("spec")).get("limits"))):
            for part in _LIMIT_PARTS:
                yield from each(f"spec.limits[{i}].{part}", _d(lim).get(part))


def _decode_error(rt: ResourceType, err: str) -> ApiError:
    return ApiError(
        400,
        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {err}',
        "BadRequest",
    )


def _base64_error(value: str) -> str | None:
    """``base64.StdEncoding`` decoding error text, or None if ``value`` decodes."""
    try:
        base64.b64decode(value, validate=True)
        return None
    except (binascii.Error, ValueError):
        alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\r\n")
        for i, ch in enumerate(value):
            if ch not in alphabet:
                return f"illegal base64 data at input byte {i}"
        return f"illegal base64 data at input byte {len(value.rstrip('='))}"


def normalize(rt: ResourceType, obj: dict[str, Any]) -> None:
    """The decode step: canonical quantities, Secret ``stringData``, dropped disabled fields."""
    originals: dict[str, GoQuantity] = {}
    for path, holder, k in _slots(rt.name, obj):
        raw = holder[k]
        try:
            if raw is None:
                q = GoQuantity(parse_go("0").value, "DecimalExponent")
            elif isinstance(raw, (dict, list)):
                raise QuantityError(
                    "quantities must match the regular expression "
                    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                )
            else:
                q = parse_go(quantity_input_text(raw))
                if isinstance(raw, str) and q.text() == raw:
                    q = decoded(raw)  # already canonicalized by the decoder: what was sent
        except QuantityError as exc:
            raise _decode_error(rt, str(exc)) from None
        originals[path] = q
        holder[k] = q.text()
    _local.slot = (obj, originals)
    if rt.name == "pods":
        # PodLevelResources is alpha and off in v1.32: DropDisabledPodFields clears it.
        _d(obj.get("spec")).pop("resources", None)
    elif rt.name == "secrets":
        data = obj.get("data") if isinstance(obj.get("data"), dict) else None
        for v in list((data or {}).values()):
            err = _base64_error(str(v or ""))
            if err:
                raise _decode_error(rt, err)
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict) and string_data:
            data = obj.setdefault("data", {}) if data is None else data
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        obj.setdefault("type", "Opaque")
    elif rt.name == "configmaps":
        for v in _d(obj.get("binaryData")).values():
            err = _base64_error(str(v or ""))
            if err:
                raise _decode_error(rt, err)
    elif rt.name in workloads.WORKLOADS:
        workloads.default(rt.name, obj)  # the v1 defaults (apps, batch, networking)


def _lookup(rt: ResourceType, obj: dict[str, Any]) -> Callable[[str, Any], GoQuantity]:
    """Quantities as decoded from the request (their Go representation matters in messages)."""
    slot = getattr(_local, "slot", None)
    originals = slot[1] if slot is not None and slot[0] is obj else {}

    def qty(path: str, raw: Any) -> GoQuantity:
        q = originals.get(path)
        if q is not None and q.text() == raw:
            return q
        try:
            return decoded(quantity_input_text(raw))
        except QuantityError as exc:
            raise _decode_error(rt, str(exc)) from None

    return qty


# ------------------------------------------------------------- validation
def _name(obj: dict[str, Any]) -> str:
    return str(_d(obj.get("metadata")).get("name") or "")


def validate_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Validate an object about to be created (``rest.BeforeCreate``)."""
    rules = _RULES.get(rt.name)
    qty = _lookup(rt, obj)
    if rules is not None and rules.create is not None:
        errs = rules.create(obj, qty)
        if errs:
            raise invalid_error(rt.kind, rt.group, _name(obj), errs)
    errs = generic_object_meta(_d(obj.get("metadata")), rt.namespaced)
    if errs:
        raise invalid_error(rt.kind, rt.group, _name(obj), errs)
    if rt.name == "pods":
        for w in vp.pod_create_warnings(obj):
            context.warn(w)


def validate_update(rt: ResourceType, old: dict[str, Any], new: dict[str, Any], sub: str) -> None:
    """Validate an update of ``old`` into ``new`` (``sub`` is ``"status"`` for /status)."""
    meta = dict(_d(new.get("metadata")))
    old_meta = _d(old.get("metadata"))
    if not meta.get("resourceVersion"):
        # AllowUnconditionalUpdate: the store fills in the stored resourceVersion first.
        meta["resourceVersion"] = old_meta.get("resourceVersion") or "1"
    view = {**new, "metadata": meta}
    if rt.name == "pods" and sub == "status":
        # podStatusStrategy.PrepareForUpdate backfills the immutable QOS class.
        status = _d(new.get("status"))
        if not status.get("qosClass") and _d(old.get("status")).get("qosClass"):
            status["qosClass"] = old["status"]["qosClass"]
    errs = generic_object_meta(meta, rt.namespaced)
    errs += validate_object_meta_update(meta, old_meta, core=False)
    rules = _RULES.get(rt.name)
    if rules is not None and sub in ("", "status"):
        fn = rules.status if sub == "status" else rules.update
        if fn is not None:
            errs += fn(view, old, _lookup(rt, new))
    if errs:
        raise invalid_error(rt.kind, rt.group, str(meta.get("name") or ""), errs)


def validate_object(rt: ResourceType, obj: dict[str, Any]) -> list[FieldError]:
    """All create-time errors of a stored object (for checking fleets): [] when valid."""
    rules = _RULES.get(rt.name)
    errs: list[FieldError] = []
    if rules is not None and rules.create is not None:
        errs += rules.create(obj, _lookup(rt, obj))
    return errs + generic_object_meta(_d(obj.get("metadata")), rt.namespaced)


_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def generate_name(base: str) -> str:
    """``names.SimpleNameGenerator``: at most 58 chars of ``base`` plus 5 random ones."""
    return base[:58] + "".join(random.choice(_NAME_CHARS) for _ in range(5))


def storage_key(rt: ResourceType, namespace: str, name: str) -> str:
    """The etcd key the real registry uses (``/registry/minions/<node>``, ...)."""
    prefix = {"nodes": "minions", "services": "services/specs"}.get(rt.name, rt.name)
    if rt.namespaced:
        return f"/registry/{prefix}/{namespace}/{name}"
    return f"/registry/{prefix}/{name}"


def uid_precondition_failed(
    rt: ResourceType, namespace: str, name: str, sent: str, stored: str
) -> ApiError:
    """409 for a PUT whose ``metadata.uid`` is not the stored one (``Preconditions.Check``)."""
    resource = rt.name + (f".{rt.group}" if rt.group else "")
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource} "{name}": StorageError: invalid object, '
        f"Code: 4, Key: {storage_key(rt, namespace, name)}, ResourceVersion: 0, "
        f"AdditionalErrorMsg: Precondition failed: UID in precondition: {sent}, UID in object "
        f"meta: {stored}",
        "Conflict",
        {"name": name, "group": rt.group, "kind": rt.name}
        if rt.group
        else {"name": name, "kind": rt.name},
    )
