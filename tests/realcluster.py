"""The real control plane as the tests meet it: one per test session, reset for every test.

One :class:`devstack.controlplane.ControlPlane` (kube-apiserver, etcd, kube-controller-manager,
kube-scheduler, kwok, Kueue) starts on first use and stops at the end of the session. After
the GPU Operator's namespace and ClusterPolicy CRD exist, its etcd content is the baseline:
every test starts from it (:meth:`ControlPlane.reset`, in milliseconds), gets the portal's
manifests applied (``deploy/kubernetes/namespace.yaml`` and ``rbac.yaml``, read from those
files), its fleet loaded by the GPU emulation (``gpuemu``), whose controllers run for the
test's duration, and reaches the API server as the portal through a fault-injecting proxy
(``devstack/faultproxy.py``) with a token of the portal's ServiceAccount from the
TokenRequest API. A call the manifests do not allow is
refused by the real RBAC authorizer.

What every test would otherwise write again goes into further baselines, made on first use
(:meth:`_Session.baseline`): the portal's manifests with its token, and the GPU Operator as
a fleet describes it (its ClusterPolicy, ConfigMap and operand DaemonSets). A test resets to
the one that matches its fleet and loads only the rest of it, so ~500 tests do not each
write the same two dozen objects.

:class:`RealCluster` offers the simulator's helpers that tests use (``get``, ``list``,
``create``, ``set_pod_phase``, ``issue_token``, ``write_kubeconfig``, ``apply_file``,
``faults``), so a test reads the same against either.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack import k8sbuild
from devstack.components import kubeconfig_yaml
from devstack.controlplane import ControlPlane, _established
from devstack.faultproxy import FaultProxy
from devstack.kubeapi import KubeAPI, KubeError, wait_for
from tests.kubesim import (
    OPERATOR_NAMESPACE,
    PORTAL_MANIFESTS,
    PORTAL_SERVICE_ACCOUNT,
    PROBE_POD,
)

MIG_FAULTS = ("mig_fail", "mig_stuck", "mig_reboot")

_lock = threading.Lock()
_shared: _Session | None = None
BARE = "default"  # the session's first baseline: the operator's namespace and CRD
PORTAL = "portal"  # BARE and the portal's manifests


@dataclass(frozen=True)
class Baseline:
    name: str
    portal_token: str = ""  # a token of the portal's ServiceAccount, whose uid the reset keeps


class _Session:
    """The session's control plane, its proxy and the baseline."""

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="gpu-portal-controlplane-"))
        self.plane = ControlPlane(self.workdir).start()
        try:
            api = self.plane.api
            api.apply({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": OPERATOR_NAMESPACE}})  # fmt: skip
            # The GPU Operator's CRD is part of the baseline: a CRD takes a second or two to
            # be established, every fleet with the operator would wait for it.
            from gpuemu import operands

            crd = api.apply(operands.crd())
            wait_for(
                lambda: _established(api.get("customresourcedefinitions", crd["metadata"]["name"])),
                what="the ClusterPolicy CRD established",
            )
            pki = self.workdir / "pki"
            self.proxy = FaultProxy(
                self.plane.url, pki / "ca.crt", pki / "apiserver.crt", pki / "apiserver.key"
            ).start()
            self.plane.mark_baseline(BARE)
        except BaseException:
            self.plane.stop()
            raise
        self._baselines: dict[str, Baseline] = {}
        self.portal_token = ""

    def baseline(self, *, portal: bool, operator: dict[str, Any] | None) -> Baseline:
        """The baseline with the portal's manifests (or not) and this GPU Operator (``None``:
        none), made now when it is the first test to need it. Every baseline with the portal
        grows from one with only the portal, so its ServiceAccount keeps one uid and one
        token stays valid across them (a token names the uid it was issued for)."""
        name = f"portal={portal} operator={json.dumps(operator, sort_keys=True)}"
        if name in self._baselines:
            return self._baselines[name]
        from gpuemu import load

        api = self.plane.api
        token, namespaces = "", []
        if portal:
            token = self._portal_baseline()
            self.plane.reset(PORTAL)
        else:
            self.plane.reset(BARE)
        if operator is not None:
            load(api, {"gpuOperator": operator})
            namespaces.append(str(operator.get("namespace") or OPERATOR_NAMESPACE))
        _settle(api, namespaces)
        self.plane.mark_baseline(name)
        self._baselines[name] = Baseline(name, token)
        return self._baselines[name]

    def _portal_baseline(self) -> str:
        """The portal's manifests on the bare baseline, and a token of its ServiceAccount."""
        if not self.portal_token:
            api = self.plane.api
            self.plane.reset(BARE)
            for manifest in PORTAL_MANIFESTS:
                api.apply_file(manifest)
            token = api.issue_token(*PORTAL_SERVICE_ACCOUNT, 24 * 3600, None)
            _settle(api, [PORTAL_SERVICE_ACCOUNT[0]])
            self.plane.mark_baseline(PORTAL)
            self.portal_token = token
        return self.portal_token

    def stop(self) -> None:
        import shutil

        self.proxy.stop()
        self.plane.stop()
        if not self.plane.failure:  # a dead component's logs stay for reading
            shutil.rmtree(self.workdir, ignore_errors=True)


def _settle(api: KubeAPI, namespaces: list[str]) -> None:
    """Wait for what controllers add on their own, so that a baseline holds it and a reset
    does not take it away again under them: each namespace's ``default`` ServiceAccount and
    ``kube-root-ca.crt`` ConfigMap (the serviceaccount and root-ca-cert-publisher
    controllers), each DaemonSet's status for its generation (the daemonset controller)."""

    def settled(ns: str) -> bool:
        try:
            api.get("serviceaccounts", "default", ns)
            api.get("configmaps", "kube-root-ca.crt", ns)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return all(
            (ds.get("status") or {}).get("observedGeneration") == ds["metadata"]["generation"]
            for ds in api.list("daemonsets", ns)
        )

    for ns in namespaces:
        wait_for(lambda ns=ns: settled(ns), what=f"namespace {ns} settled for the baseline")


def available() -> bool:
    """Whether the control plane's binaries are built (``make k8s``; needs Go)."""
    return k8sbuild.installed_dir() is not None


def session() -> _Session:
    """The session's control plane (started on first use); counts the calling test."""
    from tests.kubesim import RAN_AGAINST, _current_test

    global _shared
    RAN_AGAINST["real"].add(_current_test())
    with _lock:
        if _shared is None:
            _shared = _Session()
            atexit.register(stop_session)
        _shared.plane.check()
        return _shared


def stop_session() -> None:
    global _shared
    with _lock:
        if _shared is not None:
            _shared.stop()
            _shared = None


class Faults:
    """The simulator's fault switches on the real cluster.

    Network faults go to the proxy in front of the API server; ``quota_controller_paused``
    stops kube-controller-manager (SIGSTOP: every controller in it pauses, the quota
    controller among them) until it is turned off or the test ends; the MIG faults
    (``mig_fail``, ``mig_stuck``, ``mig_reboot``) become the GPU emulation's fault annotation
    on every node (gpuemu/migmanager.py), which mig-manager reads as the simulator's switches.
    """

    def __init__(self, cluster: RealCluster):
        self._cluster = cluster

    def update(self, **changes: Any) -> dict[str, Any]:
        paused = changes.pop("quota_controller_paused", None)
        if paused is not None:
            self._cluster.pause_controller_manager(bool(paused))
        for fault in MIG_FAULTS:
            if fault in changes:
                self._cluster.set_mig_fault(fault, bool(changes.pop(fault)))
        return self._cluster.session.proxy.faults.update(**changes)

    def reset(self) -> None:
        self._cluster.pause_controller_manager(False)
        self._cluster.session.proxy.faults.reset()


class RealCluster:
    """One test's cluster: the shared control plane reset, its fleet loaded and emulated."""

    real = True

    def __init__(self, fleet: Any, tmp_path: Path, *, portal: bool = True, **options: Any):
        from simcluster.fleet import Fleet, load_fleet

        self.fleet = fleet if isinstance(fleet, Fleet) else load_fleet(fleet)
        self.session = session()
        self.plane = self.session.plane
        self.baseline = self.session.baseline(portal=portal, operator=self.fleet.gpu_operator)
        self.plane.reset(self.baseline.name)
        self.session.proxy.faults.reset()
        self.api: KubeAPI = self.plane.api
        self.faults = Faults(self)
        self.url = self.session.proxy.url
        self.ca_pem = self.plane.ca_pem.decode()
        self._paused = False
        self.emulator = None
        self.admin_kubeconfig_path = tmp_path / "admin.kubeconfig"
        self.admin_kubeconfig_path.write_text(self.plane.admin_kubeconfig.read_text())
        if portal:  # the manifests are in the baseline; the kubeconfig is this test's
            self.portal_token = self.baseline.portal_token
            self.kubeconfig_path = self.write_kubeconfig(
                tmp_path / "kubeconfig", token=self.portal_token, user="gpu-quota-portal"
            )
        self._load(options)

    def _load(self, options: dict[str, Any]) -> None:
        from gpuemu import Emulator, Options, load

        load(self.api, self.fleet, operator=False)  # the operator is in the baseline
        self.emulator = Emulator(self.api, Options.from_fleet(self.fleet, **options)).start()

    # -------------------------------------------------------------- lifecycle
    def stop(self) -> None:
        if self.emulator is not None:
            self.emulator.stop()
            self.emulator = None
        self.pause_controller_manager(False)
        self.session.proxy.faults.reset()

    def pause_controller_manager(self, paused: bool) -> None:
        if paused == self._paused:
            return
        proc = next(c for c in self.plane.components if c.name == "kube-controller-manager").proc
        os.kill(proc.pid, signal.SIGSTOP if paused else signal.SIGCONT)
        self._paused = paused

    def stats(self) -> dict[str, int]:
        """What the portal sent through the proxy: requests seen, watches streaming now."""
        return self.session.proxy.stats()

    def set_mig_fault(self, fault: str, on: bool) -> None:
        from gpuemu.migmanager import FAULT_ANNOTATION, faults_of

        for node in self.api.list("nodes"):
            current = faults_of(node)
            wanted = current | {fault} if on else current - {fault}
            if wanted != current:
                value = ",".join(sorted(wanted)) or None
                self.api.patch(
                    "nodes",
                    node["metadata"]["name"],
                    {"metadata": {"annotations": {FAULT_ANNOTATION: value}}},
                )

    # ------------------------------------------------------------- identities
    def issue_token(
        self, namespace: str, name: str, expiration_s: int = 3600, audiences=None
    ) -> str:
        return self.api.issue_token(namespace, name, expiration_s, audiences)

    def write_kubeconfig(self, path: str | Path, token: str | None = None, user: str = "") -> Path:
        """A kubeconfig for the proxy with ``token``; without one, the admin's (direct)."""
        path = Path(path)
        if token is None:
            path.write_text(self.plane.admin_kubeconfig.read_text())
            return path
        path.write_text(kubeconfig_yaml(self.url, self.plane.ca_pem, user or "user", token=token))
        return path

    # ---------------------------------------------------------------- objects
    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any]:
        return self.api.get(resource, name, namespace)

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.api.list(resource, namespace)

    def create(
        self, resource: str, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """Create an object; a namespace is returned once pods are admitted in it (Kueue's
        pod webhook knows it: tests/kubesim.py ``create_namespace``)."""
        made = self.api.create(resource, obj, namespace)
        if resource == "namespaces":
            name = made["metadata"]["name"]
            wait_for(lambda: self.api.request("POST", f"/api/v1/namespaces/{name}/pods",
                                              PROBE_POD, params={"dryRun": "All"}),
                     what=f"pods admitted in the new namespace {name}")  # fmt: skip
        return made

    def apply_file(self, path: str | Path) -> list[dict[str, Any]]:
        return self.api.apply_file(path)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> dict[str, Any]:
        """Post a pod's phase through the status subresource, as its kubelet would."""
        from simcluster.pods import phase_status

        pod = self.api.get("pods", name, namespace)
        return self.api.patch(
            "pods", name, {"status": phase_status(pod, phase)}, namespace, subresource="status"
        )


__all__ = ["KubeError", "RealCluster", "available", "session", "stop_session"]
