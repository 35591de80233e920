"""ServiceAccounts: the controller that keeps ``default`` in every namespace, and the
ServiceAccount admission plugin for pods.

Controller (``pkg/controller/serviceaccount/serviceaccounts_controller.go``): a namespace
event (add or update) and a ServiceAccount deletion queue the namespace; the sync creates
``default`` when it is missing and the namespace is ``Active`` (an AlreadyExists, or a 403
whose cause is ``NamespaceTerminating``, is not an error). A fleet's namespaces get theirs
when the fleet loads. The sync runs ``serviceaccount_sync_s`` after the event (the real
controller takes milliseconds).

Admission (``plugin/pkg/admission/serviceaccount/admission.go``, pods on create only):

- mirror pods (annotation ``kubernetes.io/config.mirror``) are not mutated and may not
  reference a ServiceAccount, secrets, or a projected ServiceAccount token;
- ``spec.serviceAccountName`` defaults to ``default``; the ServiceAccount must exist, else
  403 ``pods "x" is forbidden: error looking up service account ns/sa: serviceaccount "sa"
  not found``. For ``default`` the plugin retries its GET ten times 100-200 ms apart
  (``getServiceAccount``), waiting for the controller: here a missing ``default`` whose
  sync is due within the shortest such window (0.9 s) is created at once, as those
  retries would have seen it;
- unless ``automountServiceAccountToken`` is false (the pod's wins over the
  ServiceAccount's), every init and regular container without a mount at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` gets one of a projected
  ``kube-api-access-<5 random>`` volume (token with ``expirationSeconds: 3607``,
  ``kube-root-ca.crt``'s ``ca.crt``, the namespace from the downward API; mode 420),
  added once; an existing ``kube-api-access-*`` volume is reused;
- a pod without ``imagePullSecrets`` gets the ServiceAccount's;
- a ServiceAccount annotated ``kubernetes.io/enforce-mountable-secrets: "true"`` limits
  the pod's secret volumes, env and envFrom secret references and pull secrets to its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from simcluster import namespaces
from simcluster.errors import ApiError
from simcluster.quotactl import forbidden
from simcluster.resources import RT
from simcluster.validation import generate_name

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

DEFAULT = "default"
ENSURED = (DEFAULT,)  # DefaultServiceAccountsControllerOptions
CONTROLLER = "kube-controller-manager"
MIRROR = "kubernetes.io/config.mirror"
ENFORCE = "kubernetes.io/enforce-mountable-secrets"
VOLUME_PREFIX = "kube-api-access-"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_EXPIRATION = 3607  # serviceaccount.WarnOnlyBoundTokenExpirationSeconds
RETRY_WINDOW_S = 0.9  # nine sleeps of at least 100 ms between the ten GETs for "default"
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # strconv.ParseBool


class ServiceAccountsController:
    """``ServiceAccountsController``: a ``default`` ServiceAccount in every namespace."""

    def __init__(self, cluster: SimCluster, sync_s: float = 0.05) -> None:
        self.cluster = cluster
        self.sync_s = sync_s
        self._due: dict[str, float] = {}

    def load(self, ts: str) -> None:
        """Fleet loading (store lock held): every namespace already has its ``default``."""
        from simcluster.fleet import new_uid

        store = self.cluster.store
        for rec in list(store.objects["namespaces"].values()):
            ns = rec.name
            for name in ENSURED:
                if store.get("serviceaccounts", ns, name) is None:
                    sa = _service_account(ns, name)
                    sa["metadata"].update(uid=new_uid(), creationTimestamp=ts)
                    store.put("serviceaccounts", sa, "ADDED", emit=False)

    def on_namespace_write(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None:  # namespaceAdded / namespaceUpdated
            self.enqueue(new["metadata"]["name"])

    def on_write(self, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:  # serviceAccountDeleted
            self.enqueue(ns)

    def enqueue(self, ns: str, delay: float | None = None) -> None:
        delay = self.sync_s if delay is None else delay
        due = time.monotonic() + delay
        self._due[ns] = min(self._due.get(ns, due), due)
        self.cluster.controllers.add_after(("serviceaccounts", ns), delay, lambda: self.sync(ns))

    def due_within(self, ns: str, horizon: float) -> bool:
        """The namespace's sync is queued and runs within ``horizon`` seconds."""
        due = self._due.get(ns)
        return due is not None and due - time.monotonic() <= horizon

    def sync(self, ns: str) -> None:
        """``syncNamespace``."""
        cluster = self.cluster
        with cluster.store.lock:
            self._due.pop(ns, None)
            rec = cluster.store.get("namespaces", "", ns)
            if rec is None or rec.fields.get("status.phase") != "Active":
                return
            for name in ENSURED:
                if cluster.store.get("serviceaccounts", ns, name) is not None:
                    continue
                try:
                    cluster.op_create(
                        RT["serviceaccounts"], ns, _service_account(ns, name), {}, CONTROLLER
                    )
                except ApiError as err:
                    causes = (err.details or {}).get("causes") or []
                    if err.code == 409 or any(
                        c.get("reason") == "NamespaceTerminating" for c in causes
                    ):
                        continue
                    self.enqueue(ns, 1.0)  # AddRateLimited


def _service_account(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": ns},
    }


# ------------------------------------------------------------------ admission
def admit_pod(cluster: SimCluster, ns: str, pod: dict[str, Any], asked: str) -> None:
    """The plugin's ``Admit`` then ``Validate`` for a pod create (store lock held).

    ``asked`` is the name the 403s print: the object's name, or its ``generateName``
    (admission runs before the name is generated).
    """
    rt = RT["pods"]
    namespaces.admit_create(cluster, rt, ns, pod)  # NamespaceLifecycle runs first
    meta = pod.get("metadata") or {}
    spec = pod.setdefault("spec", {})
    if MIRROR in (meta.get("annotations") or {}):
        _validate_mirror(rt, asked, spec)
        return
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = DEFAULT
    sa_name = str(spec["serviceAccountName"])
    sa = _lookup(cluster, ns, sa_name)
    if sa is None:
        raise forbidden(
            rt,
            asked,
            f"error looking up service account {ns}/{sa_name}: "
            f'serviceaccount "{sa_name}" not found',
        )
    spec["serviceAccount"] = sa_name  # v1's deprecated alias, set on output
    if _automount(sa, spec):
        _mount_token(spec)
    if not spec.get("imagePullSecrets") and sa.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [
            {"name": (s or {}).get("name", "")} for s in sa["imagePullSecrets"]
        ]
    if ((sa.get("metadata") or {}).get("annotations") or {}).get(ENFORCE) in _TRUE:
        reason = _limit_secret_references(sa, spec)
        if reason:
            raise forbidden(rt, asked, reason)


def _lookup(cluster: SimCluster, ns: str, name: str) -> dict[str, Any] | None:
    store = cluster.store
    rec = store.get("serviceaccounts", ns, name)
    if rec is None and name == DEFAULT:
        controller = cluster.serviceaccounts
        if controller.due_within(ns, RETRY_WINDOW_S):
            controller.sync(ns)
            rec = store.get("serviceaccounts", ns, name)
    return rec.obj() if rec is not None else None


def _automount(sa: dict[str, Any], spec: dict[str, Any]) -> bool:
    """``shouldAutomount``: the pod's preference, then the ServiceAccount's, then true."""
    if spec.get("automountServiceAccountToken") is not None:
        return bool(spec["automountServiceAccountToken"])
    if sa.get("automountServiceAccountToken") is not None:
        return bool(sa["automountServiceAccountToken"])
    return True


def token_volume_source() -> dict[str, Any]:
    """``TokenVolumeSource``: the projected ``kube-api-access`` volume (field order kept)."""
    return {
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION, "path": "token"}},
            {
                "configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
        "defaultMode": 420,
    }


def _mount_token(spec: dict[str, Any]) -> None:
    """``mountServiceAccountToken``."""
    volumes = spec.get("volumes") or []
    existing = next(
        (v.get("name") for v in volumes if str(v.get("name", "")).startswith(VOLUME_PREFIX)),
        None,
    )
    name = existing or generate_name(VOLUME_PREFIX)
    needed = False
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or []:
            mounts = c.get("volumeMounts") or []
            if any(m.get("mountPath") == TOKEN_PATH for m in mounts):
                continue
            c["volumeMounts"] = [*mounts, {"name": name, "readOnly": True, "mountPath": TOKEN_PATH}]
            needed = True
    if existing is None and needed:
        spec["volumes"] = [*volumes, {"name": name, "projected": token_volume_source()}]


def _validate_mirror(rt: Any, asked: str, spec: dict[str, Any]) -> None:
    if spec.get("serviceAccountName"):
        raise forbidden(rt, asked, "a mirror pod may not reference service accounts")
    if _secret_names(spec):
        raise forbidden(rt, asked, "a mirror pod may not reference secrets")
    for v in spec.get("volumes") or []:
        for src in ((v or {}).get("projected") or {}).get("sources") or []:
            if (src or {}).get("serviceAccountToken") is not None:
                raise forbidden(
                    rt, asked, "a mirror pod may not use ServiceAccountToken volume projections"
                )


_SECRET_REF_VOLUMES = ("cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos")


def _secret_names(spec: dict[str, Any]) -> list[str]:
    """``VisitPodSecretNames`` over every container kind and volume source."""
    names = [str((s or {}).get("name") or "") for s in spec.get("imagePullSecrets") or []]
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            for e in (c or {}).get("env") or []:
                ref = ((e or {}).get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    names.append(str(ref.get("name") or ""))
            for e in (c or {}).get("envFrom") or []:
                if (e or {}).get("secretRef"):
                    names.append(str(e["secretRef"].get("name") or ""))
    for v in spec.get("volumes") or []:
        v = v or {}
        if v.get("secret"):
            names.append(str(v["secret"].get("secretName") or ""))
        if v.get("azureFile"):
            names.append(str(v["azureFile"].get("secretName") or ""))
        for kind in _SECRET_REF_VOLUMES:
            ref = (v.get(kind) or {}).get("secretRef")
            if ref:
                names.append(str(ref.get("name") or ""))
        csi_ref = (v.get("csi") or {}).get("nodePublishSecretRef")
        if csi_ref:
            names.append(str(csi_ref.get("name") or ""))
        for src in (v.get("projected") or {}).get("sources") or []:
            if (src or {}).get("secret"):
                names.append(str(src["secret"].get("name") or ""))
    return [n for n in names if n]


def _limit_secret_references(sa: dict[str, Any], spec: dict[str, Any]) -> str:
    """``limitSecretReferences``: the first reference the ServiceAccount does not allow."""
    sa_name = (sa.get("metadata") or {}).get("name", "")
    mountable = {str((s or {}).get("name") or "") for s in sa.get("secrets") or []}
    tail = f"is not allowed because service account {sa_name} does not reference that secret"
    for v in spec.get("volumes") or []:
        secret = (v or {}).get("secret")
        if secret is not None and secret.get("secretName", "") not in mountable:
            return f'volume with secret.secretName="{secret.get("secretName", "")}" {tail}'
    for field, label in (("initContainers", "init container"), ("containers", "container")):
        for c in spec.get(field) or []:
            for e in c.get("env") or []:
                ref = ((e or {}).get("valueFrom") or {}).get("secretKeyRef")
                if ref and ref.get("name", "") not in mountable:
                    return (
                        f"{label} {c.get('name', '')} with envVar {e.get('name', '')} "
                        f'referencing secret.secretName="{ref.get("name", "")}" {tail}'
                    )
            for e in c.get("envFrom") or []:
                ref = (e or {}).get("secretRef")
                if ref and ref.get("name", "") not in mountable:
                    return (
                        f"{label} {c.get('name', '')} with envFrom referencing "
                        f'secret.secretName="{ref.get("name", "")}" {tail}'
                    )
    pull = {str((s or {}).get("name") or "") for s in sa.get("imagePullSecrets") or []}
    for i, ref in enumerate(spec.get("imagePullSecrets") or []):
        name = (ref or {}).get("name", "")
        if name not in pull:
            return (
                f'imagePullSecrets[{i}].name="{name}" is not allowed because service account '
                f"{sa_name} does not reference that imagePullSecret"
            )
    return ""
