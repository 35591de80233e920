"""ObjectMeta, labels, annotations, owner references, finalizers and label selectors.

Follows (v1.32) ``staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go``
(ValidateObjectMeta[Accessor][Update], ValidateAnnotations and the 256 KiB total,
ValidateOwnerReferences, ValidateFinalizers, ValidateImmutableField),
``apimachinery/pkg/apis/meta/v1/validation/validation.go`` (ValidateLabels,
ValidateLabelSelector, ValidateManagedFields, ValidateFieldManager) and
``pkg/apis/core/validation/validation.go`` (the core types' extra check that unqualified
finalizers are standard ones, ``validateKubeFinalizerName``). Name and value formats are in
:mod:`simcluster.validation_names`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simcluster import fielderrors as fe
from simcluster.fielderrors import FieldError, GoPtr, GoSlice, GoStruct, child, index
from simcluster.validation_names import (
    blen,
    is_qualified_name,
    is_valid_label_value,
    name_is_dns_label,
    path_segment_name,
)

FIELD_IMMUTABLE = "field is immutable"
IS_NEGATIVE = "must be greater than or equal to 0"
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * (1 << 10)
STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})
NameFn = Callable[[str, bool], list[str]]


# ---------------------------------------------------------------- metadata
def validate_label_name(name: str, path: str) -> list[FieldError]:
    return [fe.invalid(path, name, m) for m in is_qualified_name(name)]


def validate_labels(labels: Any, path: str) -> list[FieldError]:
    """``ValidateLabels``: every key a qualified name, every value a label value."""
    errs: list[FieldError] = []
    for k, v in (labels or {}).items():
        errs += validate_label_name(str(k), path)
        errs += [fe.invalid(path, str(v), m) for m in is_valid_label_value(str(v))]
    return errs


def validate_annotations(annotations: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    total = 0
    for k, v in (annotations or {}).items():
        errs += [fe.invalid(path, k, m) for m in is_qualified_name(str(k).lower())]
        total += blen(str(k)) + blen(str(v))
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(fe.too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT))
    return errs


def _owner_ref_value(ref: dict[str, Any]) -> GoStruct:
    return GoStruct(
        "v1.OwnerReference",
        (
            ("APIVersion", str(ref.get("apiVersion") or "")),
            ("Kind", str(ref.get("kind") or "")),
            ("Name", str(ref.get("name") or "")),
            ("UID", str(ref.get("uid") or "")),
            ("Controller", GoPtr("bool", ref.get("controller") is None, ref.get("controller"))),
            (
                "BlockOwnerDeletion",
                GoPtr("bool", ref.get("blockOwnerDeletion") is None, ref.get("blockOwnerDeletion")),
            ),
        ),
    )


def _parse_gv(api_version: str) -> tuple[str, str] | None:
    if not api_version:
        return "", ""
    parts = api_version.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


def validate_owner_references(refs: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    first_controller = ""
    for ref in refs or []:
        ref = ref if isinstance(ref, dict) else {}
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        gv = _parse_gv(api_version)
        group, version = gv if gv is not None else ("", "")
        if not version:
            errs.append(
                fe.invalid(child(path, "apiVersion"), api_version, "version must not be empty")
            )
        if not kind:
            errs.append(fe.invalid(child(path, "kind"), kind, "must not be empty"))
        if not ref.get("name"):
            errs.append(fe.invalid(child(path, "name"), "", "must not be empty"))
        if not ref.get("uid"):
            errs.append(fe.invalid(child(path, "uid"), "", "must not be empty"))
        if (group, version, kind) == ("", "v1", "Event"):
            errs.append(
                fe.invalid(
                    path, _owner_ref_value(ref), "/v1, Kind=Event is disallowed from being an owner"
                )
            )
        if ref.get("controller") is True:
            cur = f"{kind}/{ref.get('name') or ''}"
            if first_controller:
                value = GoSlice("[]v1.OwnerReference", tuple(_owner_ref_value(r) for r in refs))
                errs.append(
                    fe.invalid(
                        path,
                        value,
                        'Only one reference can have Controller set to true. Found "true" in '
                        f"references for {first_controller} and {cur}",
                    )
                )
            else:
                first_controller = cur
    return errs


def validate_finalizers(finalizers: Any, path: str) -> list[FieldError]:
    """apimachinery ``ValidateFinalizers``: qualified names; orphan + foreground conflict."""
    errs: list[FieldError] = []
    finalizers = [str(f) for f in finalizers or []]
    for f in finalizers:
        errs += [fe.invalid(path, f, m) for m in is_qualified_name(f)]
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        errs.append(
            fe.invalid(
                path,
                fe.go_strings(finalizers),
                "finalizer orphan and foregroundDeletion cannot be both set",
            )
        )
    return errs


def kube_finalizer_name(value: str, path: str) -> list[FieldError]:
    """core ``validateKubeFinalizerName``: an unqualified finalizer must be a standard one."""
    if "/" not in value and value not in STANDARD_FINALIZERS:
        return [
            fe.invalid(
                path, value, "name is neither a standard finalizer name nor is it fully qualified"
            )
        ]
    return []


def validate_field_manager(manager: str, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if blen(manager) > 128:
        errs.append(fe.too_long(path, 128))
    pos = 0
    for ch in manager:
        if not ch.isprintable():
            errs.append(
                fe.invalid(path, manager, f"invalid character U+{ord(ch):04X} (at position {pos})")
            )
        pos += blen(ch)
    return errs


def validate_managed_fields(entries: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, m in enumerate(entries or []):
        m = m if isinstance(m, dict) else {}
        p = index(path, i)
        op = m.get("operation") or ""
        if op not in ("Apply", "Update"):
            errs.append(fe.invalid(child(p, "operation"), op, "must be `Apply` or `Update`"))
        ftype = m.get("fieldsType") or ""
        if ftype and ftype != "FieldsV1":
            errs.append(fe.invalid(child(p, "fieldsType"), ftype, "must be `FieldsV1`"))
        errs += validate_field_manager(str(m.get("manager") or ""), child(p, "manager"))
        if blen(str(m.get("subresource") or "")) > 256:
            errs.append(fe.too_long(child(p, "subresource"), 256))
    return errs


def validate_object_meta(
    meta: dict[str, Any],
    requires_namespace: bool,
    name_fn: NameFn,
    path: str = "metadata",
    core: bool = True,
) -> list[FieldError]:
    """``ValidateObjectMetaAccessor`` (+ the core finalizer check when ``core``)."""
    errs: list[FieldError] = []
    gen_name = str(meta.get("generateName") or "")
    if gen_name:
        errs += [
            fe.invalid(child(path, "generateName"), gen_name, m) for m in name_fn(gen_name, True)
        ]
    name = str(meta.get("name") or "")
    if not name:
        errs.append(fe.required(child(path, "name"), "name or generateName is required"))
    else:
        errs += [fe.invalid(child(path, "name"), name, m) for m in name_fn(name, False)]
    ns = str(meta.get("namespace") or "")
    if requires_namespace:
        if not ns:
            errs.append(fe.required(child(path, "namespace")))
        else:
            errs += [
                fe.invalid(child(path, "namespace"), ns, m) for m in name_is_dns_label(ns, False)
            ]
    elif ns:
        errs.append(fe.forbidden(child(path, "namespace"), "not allowed on this type"))
    gen = meta.get("generation")
    if isinstance(gen, int) and not isinstance(gen, bool) and gen < 0:
        errs.append(fe.invalid(child(path, "generation"), gen, IS_NEGATIVE))
    errs += validate_labels(meta.get("labels"), child(path, "labels"))
    errs += validate_annotations(meta.get("annotations"), child(path, "annotations"))
    errs += validate_owner_references(meta.get("ownerReferences"), child(path, "ownerReferences"))
    errs += validate_finalizers(meta.get("finalizers"), child(path, "finalizers"))
    errs += validate_managed_fields(meta.get("managedFields"), child(path, "managedFields"))
    if core:
        for i, f in enumerate(meta.get("finalizers") or []):
            errs += kube_finalizer_name(str(f), index(child(path, "finalizers"), i))
    return errs


def validate_object_meta_update(
    new: dict[str, Any], old: dict[str, Any], path: str = "metadata", core: bool = True
) -> list[FieldError]:
    """``ValidateObjectMetaAccessorUpdate``: immutables, labels, annotations, ..."""
    errs: list[FieldError] = []
    if old.get("deletionTimestamp"):
        extra = sorted(set(new.get("finalizers") or []) - set(old.get("finalizers") or []))
        if extra:
            listed = "[]string{" + ", ".join(fe.go_quote(x) for x in extra) + "}"
            errs.append(
                fe.forbidden(
                    child(path, "finalizers"),
                    "no new finalizers can be added if the object is being deleted, found new "
                    f"finalizers {listed}",
                )
            )
    if not new.get("resourceVersion"):
        errs.append(
            fe.invalid(child(path, "resourceVersion"), "", "must be specified for an update")
        )
    ngen, ogen = new.get("generation") or 0, old.get("generation") or 0
    if isinstance(ngen, int) and isinstance(ogen, int) and ngen < ogen:
        errs.append(fe.invalid(child(path, "generation"), ngen, "must not be decremented"))
    for fld in ("name", "namespace", "uid", "creationTimestamp"):
        nv, ov = new.get(fld) or "", old.get(fld) or ""
        if nv != ov:
            errs.append(fe.invalid(child(path, fld), _time_value(fld, nv), FIELD_IMMUTABLE))
    for fld in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        if new.get(fld) != old.get(fld):
            nv = new.get(fld)
            errs.append(fe.invalid(child(path, fld), _time_value(fld, nv), FIELD_IMMUTABLE))
    errs += validate_labels(new.get("labels"), child(path, "labels"))
    errs += validate_annotations(new.get("annotations"), child(path, "annotations"))
    errs += validate_owner_references(new.get("ownerReferences"), child(path, "ownerReferences"))
    errs += validate_managed_fields(new.get("managedFields"), child(path, "managedFields"))
    if core:
        for i, f in enumerate(new.get("finalizers") or []):
            errs += kube_finalizer_name(str(f), index(child(path, "finalizers"), i))
    return errs


class GoTime(fe.GoValue):
    """``metav1.Time`` implements ``fmt.Stringer`` (``time.Time.String()``) and marshals as
    RFC 3339 (``MarshalJSON``)."""

    stringer = True

    def __init__(self, iso: str) -> None:
        self.iso = iso

    def string(self) -> str:
        # 2024-01-02T03:04:05Z -> 2024-01-02 03:04:05 +0000 UTC
        if len(self.iso) >= 19:
            return f"{self.iso[:10]} {self.iso[11:19]} +0000 UTC"
        return "0001-01-01 00:00:00 +0000 UTC"

    def sharp(self) -> str:
        return self.string()

    def json(self) -> str:
        return fe.go_json(self.iso if len(self.iso) >= 19 else "0001-01-01T00:00:00Z")


def _time_value(fld: str, value: Any) -> Any:
    if fld in ("creationTimestamp", "deletionTimestamp"):
        if value is None and fld == "deletionTimestamp":
            return None
        return GoTime(str(value or ""))
    if fld == "deletionGracePeriodSeconds":
        return value
    return value


def validate_label_selector(sel: Any, path: str) -> list[FieldError]:
    """``ValidateLabelSelector`` (meta/v1): matchLabels and matchExpressions."""
    errs: list[FieldError] = []
    if not isinstance(sel, dict):
        return errs
    errs += validate_labels(sel.get("matchLabels"), child(path, "matchLabels"))
    for i, expr in enumerate(sel.get("matchExpressions") or []):
        p = index(child(path, "matchExpressions"), i)
        expr = expr if isinstance(expr, dict) else {}
        op = str(expr.get("operator") or "")
        values = [str(v) for v in expr.get("values") or []]
        if op in ("In", "NotIn"):
            if not values:
                errs.append(
                    fe.required(
                        child(p, "values"), "must be specified when `operator` is 'In' or 'NotIn'"
                    )
                )
        elif op in ("Exists", "DoesNotExist"):
            if values:
                errs.append(
                    fe.forbidden(
                        child(p, "values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            errs.append(fe.invalid(child(p, "operator"), op, "not a valid selector operator"))
        errs += validate_label_name(str(expr.get("key") or ""), child(p, "key"))
        for j, v in enumerate(values):
            errs += [
                fe.invalid(index(child(p, "values"), j), v, m) for m in is_valid_label_value(v)
            ]
    return errs


def generic_object_meta(meta: dict[str, Any], namespaced: bool) -> list[FieldError]:
    """The generic step of ``rest.BeforeCreate``: path-segment names, no core checks."""
    return validate_object_meta(meta, namespaced, path_segment_name, "metadata", core=False)
