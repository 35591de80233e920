"""Kueue's on-demand visibility API (``visibility.kueue.x-k8s.io``) on the local control plane:
the pending workloads of a LocalQueue with their positions, as users of Kueue read them
(``kubectl get --raw`` of ``/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/NS/``
``localqueues/LQ/pendingworkloads``).

Kueue serves it from its controller manager as an extension API server (kueue
``pkg/visibility/server.go`` ``CreateAndStartVisibilityServer``; feature gate
``VisibilityOnDemand``) and registers it with an APIService for a Service
(``config/components/visibility/``). The API server reaches such a Service through its
aggregator: with ``--enable-aggregator-routing`` at the address of the Service's EndpointSlice
(kubernetes ``cmd/kube-apiserver/app/server.go`` ``buildServiceResolver``, k8s.io/apiserver
``pkg/util/proxy/proxy.go`` ``ResolveEndpoint``). EndpointSlice validation refuses loopback
addresses (kubernetes ``pkg/apis/discovery/validation`` via ``ValidateEndpointIP``), so the
server binds the machine's own address; a machine with none (loopback only) runs Kueue
without the visibility API, and the portal then says that no queue position is served.

The server's certificate is read from a fixed directory (``certDir = "/visibility"`` when
Kueue's internal cert management is off) that every control plane on the machine shares; the
APIService skips verifying it, as Kueue's own manifest does (``insecureSkipTLSVerify: true``
in ``apiservice_v1beta2.yaml``). The caller's identity travels in the front proxy's headers
and Kueue authorizes it with a SubjectAccessReview, so RBAC on
``localqueues/pendingworkloads`` applies as anywhere.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import socket
from pathlib import Path
from typing import Any

import psutil

from devstack.kubeapi import wait_for

GROUP = "visibility.kueue.x-k8s.io"
VERSION = "v1beta2"
SERVICE = "visibility-server"
CERT_DIR = Path("/visibility")


def host_address() -> str | None:
    """An IPv4 address of this machine that is neither loopback nor link-local, or None."""
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family != socket.AF_INET:
                continue
            if addr.address.startswith(("127.", "169.254.")):
                continue
            return addr.address
    return None


def install_certificate(ca) -> None:
    """A serving pair in :data:`CERT_DIR` unless one is there (control planes share it; a
    pair rewritten under a running server would be reloaded half new, half old)."""
    CERT_DIR.mkdir(parents=True, exist_ok=True)
    with open(CERT_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (CERT_DIR / "tls.crt").exists() and (CERT_DIR / "tls.key").exists():
            return
        pair = ca.issue(
            "kueue-visibility", SERVICE, hosts=(f"{SERVICE}.kueue-system.svc", "localhost")
        )
        for src, name in ((pair.key, "tls.key"), (pair.cert, "tls.crt")):
            tmp = CERT_DIR / f".{name}.tmp"
            shutil.copy(src, tmp)
            tmp.replace(CERT_DIR / name)


def config(address: str, port: int) -> dict[str, Any]:
    """The ``visibilityServer`` section of Kueue's Configuration."""
    return {"bindAddress": address, "bindPort": port}


def objects(namespace: str, address: str, port: int) -> list[dict[str, Any]]:
    """Service, EndpointSlice and APIService that route the group to the server."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": namespace},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": SERVICE,
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": SERVICE},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{VERSION}.{GROUP}"},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "insecureSkipTLSVerify": True,
                "service": {"name": SERVICE, "namespace": namespace, "port": 443},
            },
        },
    ]


def _available(api) -> bool:
    with contextlib.suppress(Exception):
        status = api.get("apiservices", f"{VERSION}.{GROUP}").get("status") or {}
        return any(
            c.get("type") == "Available" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
    return False


def register(api, namespace: str, address: str, port: int, timeout: float) -> None:
    """Apply :func:`objects` and wait until the aggregator reports the APIService Available."""
    for doc in objects(namespace, address, port):
        api.apply(doc)
    wait_for(lambda: _available(api), timeout=timeout, what=f"APIService {VERSION}.{GROUP}")
