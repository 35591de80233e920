"""The simulated cluster: lifecycle, fleet loading and the in-process helpers.

The API semantics live in mixins: :mod:`simcluster.crud` (writes and admission),
:mod:`simcluster.lists` (pagination), :mod:`simcluster.pods` (pods, eviction) and
:mod:`simcluster.quotactl` (the quota controller).

:class:`SimCluster` is also the in-process entry point for tests::

    sim = SimCluster.from_fleet("simcluster/fleets/demo.yaml")
    sim.start(port=0)
    sim.write_kubeconfig(tmp / "kubeconfig")
    sim.faults.update(error_rate=1.0)
    sim.stop()
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from simcluster.auth import Authenticator, token_request
from simcluster.clock import ClockTimer, SimClock
from simcluster.controllers import ControllerOps
from simcluster.crud import CrudOps
from simcluster.errors import not_found
from simcluster.faults import Faults
from simcluster.fleet import Fleet, load_fleet, namespace_object, now_iso, paused_gc
from simcluster.kubeconfig import write_kubeconfig
from simcluster.lists import ListOps
from simcluster.manifests import apply_file
from simcluster.patch import MERGE
from simcluster.pods import PodOps, phase_status, started_pods
from simcluster.quotactl import QuotaOps
from simcluster.rbac import Authorizer, install_bootstrap
from simcluster.resources import BY_PATH, RESOURCES, RT, SYSTEM_NAMESPACES, ResourceType
from simcluster.ssa import record_update
from simcluster.store import Record, Store

log = logging.getLogger("simcluster")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class SimCluster(CrudOps, ListOps, PodOps, QuotaOps, ControllerOps):
    """An in-memory Kubernetes API server with GPU nodes, served over HTTP."""

    def __init__(
        self,
        fleet: Fleet | None = None,
        *,
        continue_ttl: float = 300.0,
        history_size: int = 10_000,
        token: str | None = None,
        mig_step_s: float = 0.2,
        bookmark_interval_s: float = 60.0,  # the watch cache: about once a minute
        quota_sync_s: float = 0.1,
        quota_resync_s: float = 300.0,
        pdb_sync_s: float = 0.1,
        namespace_sync_s: float = 5.0,
        pod_stop_s: float = 1.0,
        lease_renew_s: float = 10.0,
        podgc_quarantine_s: float = 40.0,
        serviceaccount_sync_s: float = 0.05,
        config_mount_delay_s: float | None = None,
        device_plugin_restart_s: float | None = None,
        client_pause_timeout_s: float | None = None,
    ) -> None:
        self.store = Store(history_size)
        self.faults = Faults()
        self.continue_ttl = continue_ttl
        # authentication is always on: the admin token is random unless given (auth.py)
        self.authn = Authenticator(self, token)
        self.token: str = self.authn.admin_token
        self.authz = Authorizer(self)
        self.bookmark_interval_s = bookmark_interval_s
        self.name = fleet.name if fleet else "simcluster"
        self.started_at = time.time()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""
        # The host name clients use when it is not the bound one (a compose service name):
        # written into kubeconfigs and the serving certificate.
        self.advertise_host = ""
        self.ca_pem = ""  # the serving certificate (PEM), set by start() (tls.py)
        from simcluster.gpuoperator import GpuOperator
        from simcluster.migmanager import MigManager

        # the GPU operator and mig-manager (gpuoperator.py, migmanager.py): None takes the
        # fleet's gpuOperator keys, else the real components' timings (docs/simcluster.md)
        self.clock = SimClock()
        self.timer = ClockTimer(self.clock)
        self.gpu_operator = GpuOperator(
            self,
            config_mount_delay_s=config_mount_delay_s,
            device_plugin_restart_s=device_plugin_restart_s,
            client_pause_timeout_s=client_pause_timeout_s,
        )
        self.mig = MigManager(self, step_s=mig_step_s)
        # controllers (controllers.py): delays as on a real control plane, see docs
        self._init_controllers(
            quota_sync_s=quota_sync_s,
            quota_resync_s=quota_resync_s,
            pdb_sync_s=pdb_sync_s,
            namespace_sync_s=namespace_sync_s,
            pod_stop_s=pod_stop_s,
            lease_renew_s=lease_renew_s,
            podgc_quarantine_s=podgc_quarantine_s,
            serviceaccount_sync_s=serviceaccount_sync_s,
        )
        self._load(fleet or Fleet())
        with self.store.lock:
            install_bootstrap(self.store, now_iso())

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def from_fleet(cls, src: str | Path | dict[str, Any] | Fleet | None, **kw: Any) -> SimCluster:
        """Build from a fleet file path, a fleet dict (compact schema) or a :class:`Fleet`."""
        fleet = src if isinstance(src, Fleet) else load_fleet(src)
        return cls(fleet, **kw)

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve in a background thread; returns the base URL (also ``self.url``)."""
        from simcluster.server import make_server

        self._server = make_server(self, host, port)
        real_port = self._server.server_address[1]
        self.url = f"http://{host}:{real_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="simcluster-http", daemon=True
        )
        self._thread.start()
        return self.url

    def serve_forever(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Serve in the calling thread (the CLI)."""
        from simcluster.server import make_server

        self._server = make_server(self, host, port)
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop serving; open watches end."""
        self.store.close()
        self.mig.stop()
        self.timer.stop()
        self._stop_controllers()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def write_kubeconfig(
        self, path: str | Path, token: str | None = None, user: str = "simcluster"
    ) -> Path:
        """Write a kubeconfig for this server: the admin's, or one with ``token``.

        The user entry and the (current) context are named ``user``; the cluster entry is
        always ``simcluster``, at the ``https`` URL (the same port also answers plain HTTP,
        ``self.url``) with the serving certificate pinned: kubectl sends a kubeconfig's
        token only over TLS.
        """
        if not self.url:
            raise RuntimeError("start() the server before writing a kubeconfig")
        server = "https://" + self.url.removeprefix("http://")
        if self.advertise_host:
            server = f"https://{self.advertise_host}:{self.url.rsplit(':', 1)[1]}"
        return write_kubeconfig(path, server, token or self.token, user, self.ca_pem)

    def issue_token(
        self,
        namespace: str,
        name: str,
        expiration_s: int = 3600,
        audiences: list[str] | None = None,
    ) -> str:
        """A ServiceAccount token, issued like ``POST .../serviceaccounts/{name}/token``."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_s}
        if audiences:
            spec["audiences"] = list(audiences)
        return token_request(self, namespace, name, {"spec": spec}, {})["status"]["token"]

    def apply_file(self, path: str | Path) -> list[dict[str, Any]]:
        """Create or update every object of a YAML manifest as the admin (kubectl apply)."""
        return apply_file(self, path)

    def __enter__(self) -> SimCluster:
        if not self.url:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- load
    def _load(self, fleet: Fleet) -> None:
        s = self.store
        with s.lock, paused_gc():  # fleet.py: every stored object survives
            ts = now_iso()
            names = {n["metadata"]["name"] for n in fleet.namespaces}
            for ns in SYSTEM_NAMESPACES:
                if ns not in names:
                    s.put("namespaces", namespace_object(ns, None, ts), "ADDED", emit=False)
            for kind, objs in (
                ("namespaces", fleet.namespaces),
                ("priorityclasses", fleet.priorityclasses),
                ("nodes", fleet.nodes),
                ("configmaps", fleet.configmaps),
                ("pods", started_pods(fleet.pods)),
            ):
                for obj in objs:
                    s.put(kind, obj, "ADDED", emit=False)
            for obj in fleet.resourcequotas:
                ns = obj["metadata"]["namespace"]
                obj["status"] = self._quota_status(obj, ns)
                record_update(None, obj, "simcluster-fleet")
                s.put("resourcequotas", obj, "ADDED", emit=False)
            self.gpu_operator.load(fleet)
            self.kueue.configure(fleet.kueue)  # kueue.py: the fleet's ``kueue`` key
            self.mig.load(fleet.nodes)
            self._load_controllers(fleet.nodes)
            s.compact()

    # -------------------------------------------------------- python helpers
    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any]:
        """Decoded object or 404 :class:`ApiError`."""
        with self.store.lock:
            rec = self.store.get(resource, namespace, name)
            if rec is None:
                raise not_found(resource, name)
            return rec.obj()

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """All objects of a resource (decoded; for tests and small fleets)."""
        with self.store.lock:
            keys, lo, hi = self.store.key_range(resource, namespace)
            objs = self.store.objects[resource]
            return [objs[k].obj() for k in keys[lo:hi]]

    def create(
        self, resource: str, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """Create through the same path as ``POST`` (admission included)."""
        rt = RT[resource]
        ns = (
            namespace
            or (obj.get("metadata") or {}).get("namespace")
            or ("default" if rt.namespaced else "")
        )
        _, raw = self.op_create(rt, ns, copy.deepcopy(obj), {}, "simcluster")
        return json.loads(raw)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> dict[str, Any]:
        """Change a pod's phase through the status subresource (quota recomputes)."""
        with self.store.lock:
            pod = self._existing(RT["pods"], namespace, name).obj()
            body = _dumps({"status": phase_status(pod, phase)})
            _, raw = self.op_patch(
                RT["pods"], namespace, name, "status", body, MERGE, {}, "kubelet"
            )
        return json.loads(raw)

    def compact_history(self) -> None:
        """Drop the watch history: watches from older resourceVersions now get 410."""
        self.store.compact()

    def counts(self) -> dict[str, int]:
        with self.store.lock:
            return {r.name: self.store.count(r.name) for r in RESOURCES}

    # -------------------------------------------------------------- helpers
    @staticmethod
    def resource_for(group_version: str, name: str) -> ResourceType | None:
        return BY_PATH.get((group_version, name))

    def _require_ns(self, rt: ResourceType, ns: str) -> None:
        if rt.namespaced and self.store.get("namespaces", "", ns) is None:
            raise not_found("namespaces", ns)

    def _existing(self, rt: ResourceType, ns: str, name: str) -> Record:
        rec = self.store.get(rt.name, ns if rt.namespaced else "", name)
        if rec is None:
            raise not_found(rt.name, name, rt.group)
        return rec

    def _after_write(
        self, rt: ResourceType, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        self._on_write(rt, ns, old, new)  # controllers: quota, PDBs, GC, kubelets, ...
        self.gpu_operator.on_write(rt.name, ns, old, new)
        if rt.name == "nodes" and new is not None:
            self.mig.on_node_write(old, new)


# ------------------------------------------------------------------ helpers
