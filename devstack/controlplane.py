"""A real Kubernetes control plane on loopback: the harness for the tests, the demo and the benches.

:class:`ControlPlane` starts, from the binaries ``make k8s`` builds (``devstack/k8sbuild.py``):

- etcd (``--unsafe-no-fsync``: a throw-away data directory);
- kube-apiserver with TLS, a client CA, ServiceAccount tokens through TokenRequest (an RSA
  signing key), ``--authorization-mode=Node,RBAC`` and the default admission plugins
  (ResourceQuota among them);
- kube-controller-manager with the controllers the portal relies on (:data:`CONTROLLERS`),
  each under its own ServiceAccount (``--use-service-account-credentials``, as kubeadm);
- kube-scheduler;
- kwok, the fake kubelet: it manages every node but those labelled
  ``gpuemu.gpu-portal.dev/kubelet: none`` (Ready, leases renewed) and marks the pods bound
  to them Running, with kwok's own "fast" stages;
- Kueue's controller manager, its CRDs from the module it was built from, its webhooks served
  on 127.0.0.1 under a certificate of the harness' CA and registered with ``url`` client
  configs (no Service on loopback), and its visibility API (queue positions) behind an
  APIService when the machine has an address other than loopback (devstack/kueuevisibility.py).

Every component listens on a free loopback port and logs to ``<workdir>/logs/<name>.log``. A
monitor thread notices a component that exits: :meth:`check` then raises
:class:`ComponentDied` with its log's tail, and the failure is printed at once.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from devstack import etcdreset, k8sbuild, kueuestart
from devstack.components import (
    Component,
    ComponentDied,
    free_port,
    kubeconfig_yaml,
    tail,
)
from devstack.kubeapi import KubeAPI, KubeError, wait_for
from devstack.kueuestart import KUEUE_NAMESPACE
from devstack.pki import CertificateAuthority, service_account_keys

# Every node has a (fake) kubelet, as on the simulator, except one labelled
# NO_KUBELET_LABEL=none: kwok leaves it alone (its status stays as written, e.g. NotReady).
NO_KUBELET_LABEL = "gpuemu.gpu-portal.dev/kubelet"
# Our kwok stages, replacing kwok's own of the same file name (each file says why).
KWOK_STAGES = Path(__file__).parent / "kwok-stages"
SERVICE_CIDR = "10.96.0.0/16"
# The aggregator's client certificate (kubeadm's name for it).
FRONT_PROXY_CLIENT = "front-proxy-client"
# kube-controller-manager's controllers the portal and its emulation depend on
# (cmd/kube-controller-manager/names/controller_names.go for the names).
CONTROLLERS = (
    "resourcequota-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
    "job-controller",
    "replicaset-controller",
    "deployment-controller",
    "daemonset-controller",
    "disruption-controller",
    "pod-garbage-collector-controller",
    "ttl-after-finished-controller",
    # Lifts the not-ready:NoSchedule taint the TaintNodesByCondition admission plugin puts on
    # every new node, once kwok reports it Ready (pkg/controller/nodelifecycle).
    "node-lifecycle-controller",
    # Creates a pod's ResourceClaims from its ResourceClaimTemplates and deletes them with
    # the pod (pkg/controller/resourceclaim): Dynamic Resource Allocation (gpuemu/dra.py).
    "resourceclaim-controller",
)


class ControlPlane:
    """One local cluster. ``start()`` returns when every component answers; ``stop()`` ends all."""

    def __init__(
        self,
        workdir: str | Path,
        *,
        binaries: Path | None = None,
        kueue: bool = True,
        kueue_fair_sharing: bool = False,
        port: int = 0,
    ):
        self.workdir = Path(workdir)
        self.port = port
        self.binaries = binaries
        self.with_kueue = kueue
        # Kueue's fair sharing (its Configuration's fairSharing stanza): off for the test
        # planes, whose preemption tests assume classic preemption; on for the demo's.
        self.kueue_fair_sharing = kueue_fair_sharing
        self.components: list[Component] = []
        self.failure = ""
        self.url = ""
        self.ca_pem = b""
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self.versions: dict[str, str] = {}
        self.start_seconds = 0.0
        self.api: KubeAPI | None = None
        self._monitor: threading.Thread | None = None
        self._baselines: dict[str, dict[str, dict[str, Any]]] = {}
        self.etcd_url = ""
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 180.0) -> ControlPlane:
        began = time.monotonic()
        if self.binaries is None:
            self.binaries = k8sbuild.installed_dir()
            if self.binaries is None:
                raise ComponentDied(
                    "the control plane's binaries are not built: run `make k8s` (needs Go)"
                )
        self.versions = dict(
            line.split("=", 1) for line in (self.binaries / "versions").read_text().split()
        )
        bin_dir = self.binaries / "bin"
        self.workdir.mkdir(parents=True, exist_ok=True)
        logs = self.workdir / "logs"
        pki = self.workdir / "pki"
        if pki.exists():
            shutil.rmtree(pki)
        ca = CertificateAuthority(pki)
        self.ca_pem = ca.pem
        api_port = self.port or free_port()
        self.url = f"https://127.0.0.1:{api_port}"
        serving = ca.issue(
            "apiserver",
            "kube-apiserver",
            hosts=("127.0.0.1", "localhost", "10.96.0.1", "kubernetes", "kubernetes.default",
                   "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
        )  # fmt: skip
        admin = ca.issue("admin", "kubernetes-admin", organization="system:masters", client=True)
        front = CertificateAuthority(pki / "front-proxy", name="gpu-portal-front-proxy-ca")
        proxy_client = front.issue("proxy-client", FRONT_PROXY_CLIENT, client=True)
        sa_key, sa_pub = service_account_keys(pki)
        self.admin_kubeconfig.write_text(
            kubeconfig_yaml(self.url, ca.pem, "kubernetes-admin", cert=admin.cert, key=admin.key)
        )
        kubeconfigs = {}
        for name, user in (
            ("kube-controller-manager", "system:kube-controller-manager"),
            ("kube-scheduler", "system:kube-scheduler"),
        ):
            pair = ca.issue(name + "-client", user, client=True)
            path = self.workdir / f"{name}.kubeconfig"
            path.write_text(kubeconfig_yaml(self.url, ca.pem, user, cert=pair.cert, key=pair.key))
            kubeconfigs[name] = path

        etcd_data = self.workdir / "etcd"
        if etcd_data.exists():
            shutil.rmtree(etcd_data)
        etcd_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        etcd = self._add(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={etcd_data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                # 8 GiB, etcd's suggested maximum (default 2 GiB): a fleet of 150,000 pods
                # with their revisions between the API server's compactions passes 2 GiB.
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
            logs,
        )
        apiserver = self._add(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.cert_path}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                # The `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints
                # validation refuses (pkg/apis/core/validation: loopback): nothing in this
                # cluster dials it, so it is not reconciled.
                "--endpoint-reconciler-type=none",
                # The aggregation layer, for Kueue's visibility API (devstack/kueuevisibility.py):
                # requests are proxied with the front proxy's client certificate and the
                # caller's identity in X-Remote-* headers, to the address of the Service's
                # EndpointSlice (there is no Service network to reach a ClusterIP).
                f"--requestheader-client-ca-file={front.cert_path}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={proxy_client.cert}",
                f"--proxy-client-key-file={proxy_client.key}",
                "--enable-aggregator-routing=true",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
            logs,
        )
        cm_port, sched_port = free_port(), free_port()
        self.scheduler_port = sched_port
        controller_manager = self._add(
            "kube-controller-manager",
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kubeconfigs['kube-controller-manager']}",
                f"--authentication-kubeconfig={kubeconfigs['kube-controller-manager']}",
                f"--authorization-kubeconfig={kubeconfigs['kube-controller-manager']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={cm_port}",
                f"--cert-dir={pki / 'kcm'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={ca.cert_path}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=" + ",".join(CONTROLLERS),
                # how often the node lifecycle controller looks (default 5 s): a new node is
                # schedulable about a second after kwok marks it Ready
                "--node-monitor-period=1s",
                "--profiling=false",
                "--v=1",
            ],
            logs,
        )
        scheduler = self._add(
            "kube-scheduler",
            [
                str(bin_dir / "kube-scheduler"),
                f"--kubeconfig={kubeconfigs['kube-scheduler']}",
                f"--authentication-kubeconfig={kubeconfigs['kube-scheduler']}",
                f"--authorization-kubeconfig={kubeconfigs['kube-scheduler']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                f"--cert-dir={pki / 'scheduler'}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
            logs,
        )
        ours = sorted(KWOK_STAGES.glob("*.yaml"))
        stages = [
            path
            for path in sorted((self.binaries / "kwok-stages").glob("*.yaml"))
            if path.name not in {p.name for p in ours}
        ] + ours
        kwok = self._add(
            "kwok",
            [
                str(bin_dir / "kwok"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--manage-nodes-with-label-selector={NO_KUBELET_LABEL}!=none",
                f"--server-address=127.0.0.1:{free_port()}",
                "--node-lease-duration-seconds=40",
                *[f"--config={s}" for s in stages],
            ],
            logs,
        )

        try:
            self._start_monitor()
            etcd.start()
            wait_for(
                lambda: self._http_ok(f"{self.etcd_url}/health"),
                timeout=30,
                what="etcd /health",
            )
            etcd.started_s = time.monotonic() - began
            apiserver.start()
            self.api = KubeAPI(self.url, ca.cert_path, cert=(str(admin.cert), str(admin.key)))
            wait_for(
                lambda: (
                    self._alive_or_raise() and self.api.request("GET", "/readyz", ok=(500,)) == "ok"
                ),
                timeout=timeout,
                what="kube-apiserver /readyz",
            )
            apiserver.started_s = time.monotonic() - began
            for component in (controller_manager, scheduler, kwok):
                component.start()
            if self.with_kueue:
                self._start_kueue(ca, bin_dir, logs, began, timeout)
            wait_for(
                lambda: (
                    self._alive_or_raise() and self.api.get("serviceaccounts", "default", "default")
                ),
                timeout=timeout,
                what="the serviceaccount controller (default/default)",
            )
            controller_manager.started_s = time.monotonic() - began
            wait_for(
                lambda: self._alive_or_raise() and self._healthz(sched_port),
                timeout=timeout,
                what="kube-scheduler /healthz",
            )
            scheduler.started_s = time.monotonic() - began
            kwok.started_s = time.monotonic() - began
        except BaseException as exc:
            detail = self.failure or self._tails()
            self.stop()
            if isinstance(exc, ComponentDied):
                raise
            raise ComponentDied(f"the control plane did not start: {exc}\n{detail}") from exc
        self.start_seconds = time.monotonic() - began
        return self

    def _start_kueue(self, ca, bin_dir: Path, logs: Path, began: float, timeout: float) -> None:
        kueuestart.start(self, ca, bin_dir, logs, began, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM every component at once, SIGKILL what is left after ``timeout``."""
        self._stopping.set()
        if self.api is not None:
            self.api.close()
        running = [c for c in self.components if c.alive()]
        for component in running:
            component.proc.terminate()
        deadline = time.monotonic() + timeout
        for component in running:
            try:
                component.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                component.proc.kill()
                component.proc.wait(5)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ baseline
    def mark_baseline(self, name: str = "default") -> int:
        """Remember etcd's content now under ``name`` (:mod:`devstack.etcdreset`); returns
        the keys counted. A harness may keep several (say, with and without an add-on)."""
        self._baselines[name] = etcdreset.snapshot(self.etcd_url)
        return len(self._baselines[name])

    def has_baseline(self, name: str) -> bool:
        return name in self._baselines

    def reset(self, name: str = "default") -> int:
        """Back to the baseline ``name`` (:func:`devstack.etcdreset.reset`), whichever was
        current before; returns the keys changed.

        A controller that was syncing when its objects vanished (the job controller making
        a Job's next pod, say) can write once more right after; so the reset is repeated,
        a few milliseconds apart, until a pass finds nothing to undo (at most 5 passes)."""
        baseline = self._baselines[name]
        daemon_pods = etcdreset.new_pods_owned_by(self.etcd_url, baseline, "DaemonSet")
        changed = etcdreset.reset(self.etcd_url, baseline, KUEUE_NAMESPACE)
        total, passes = changed, 1
        while changed and passes < 5:
            time.sleep(0.02)
            changed = etcdreset.reset(self.etcd_url, baseline, KUEUE_NAMESPACE)
            total, passes = total + changed, passes + 1
        if daemon_pods:
            total += self._settle_daemon_sets(baseline)
        return total

    def _settle_daemon_sets(self, baseline: dict[str, Any], quiet_s: float = 0.3) -> int:
        """After a reset that removed DaemonSet pods: the DaemonSet controller may not have
        seen their nodes go yet and makes their pods again, Pending for nodes that no longer
        exist; it deletes those itself once it has (kubernetes pkg/controller/daemon
        daemon_controller.go ``getUnscheduledPodsWithoutNode``), a moment that a test must
        not see. Undo what comes until nothing has for ``quiet_s`` (at most 5 s)."""
        total = 0
        start = time.monotonic()
        quiet_until = start + quiet_s
        while time.monotonic() < min(quiet_until, start + 5):
            time.sleep(0.05)
            changed = etcdreset.reset(self.etcd_url, baseline, KUEUE_NAMESPACE)
            if changed:
                total += changed
                quiet_until = time.monotonic() + quiet_s
        return total

    # ------------------------------------------------------------------ health
    def check(self) -> None:
        """Raise :class:`ComponentDied` when a component has exited since the start."""
        if self.failure:
            raise ComponentDied(self.failure)

    def memory_mib(self) -> dict[str, float]:
        """Resident memory of each running component (MiB)."""
        out = {}
        for component in self.components:
            if component.alive():
                with contextlib.suppress(psutil.Error):
                    rss = psutil.Process(component.proc.pid).memory_info().rss
                    out[component.name] = rss / 2**20
        return out

    def server_version(self) -> str:
        return self.api.request("GET", "/version")["gitVersion"]

    def restart_scheduler(self, timeout: float = 30.0) -> None:
        """Start kube-scheduler afresh, its cache rebuilt from the API server.

        An etcd reset under a running scheduler (:meth:`reset`) can leave pods of the test
        before in its cache, holding their nodes' GPUs: seen only with several test
        processes on 2 cores, one test in three full runs, whose pods then stayed Pending
        with "Insufficient nvidia.com/gpu" while the API server listed no pod there. A test
        whose assertions depend on the scheduler's arithmetic right after a reset calls
        this first (about a second)."""
        component = next(c for c in self.components if c.name == "kube-scheduler")
        component.restarting = True
        try:
            if component.proc is not None and component.proc.poll() is None:
                component.proc.terminate()
                try:
                    component.proc.wait(10)
                except subprocess.TimeoutExpired:
                    component.proc.kill()
                    component.proc.wait()
            component.start()
        finally:
            component.restarting = False
        wait_for(
            lambda: self._alive_or_raise() and self._healthz(self.scheduler_port),
            timeout=timeout,
            what="kube-scheduler /healthz after its restart",
        )

    def _add(self, name: str, args: list[str], logs: Path) -> Component:
        component = Component(name, args, logs / f"{name}.log")
        self.components.append(component)
        return component

    def _alive_or_raise(self) -> bool:
        for component in self.components:
            if component.proc is not None and component.proc.poll() is not None:
                raise ComponentDied(self._died(component))
        return True

    def _died(self, component: Component) -> str:
        return (
            f"{component.name} exited with status {component.proc.returncode}; "
            f"last lines of {component.log}:\n{tail(component.log)}"
        )

    def _tails(self) -> str:
        return "\n".join(
            f"--- {c.name} ({c.log}):\n{tail(c.log, 15)}" for c in self.components if c.proc
        )

    def _start_monitor(self) -> None:
        def watch() -> None:
            while not self._stopping.wait(0.5):
                for component in self.components:
                    if component.restarting:
                        continue
                    if component.proc is not None and component.proc.poll() is not None:
                        if not self._stopping.is_set() and not self.failure:
                            self.failure = self._died(component)
                            print(
                                f"\n*** control plane: {self.failure}\n",
                                file=sys.stderr,
                                flush=True,
                            )
                        return

        self._monitor = threading.Thread(target=watch, name="controlplane-monitor", daemon=True)
        self._monitor.start()

    def _http_ok(self, url: str) -> bool:
        import requests

        try:
            return requests.get(url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def _healthz(self, port: int) -> bool:
        """A component's /healthz on its self-signed serving certificate (not verified)."""
        import ssl
        import urllib.request

        context = ssl._create_unverified_context()  # noqa: S323 - loopback health probe
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/healthz", timeout=2, context=context
            ) as resp:
                return resp.status == 200
        except OSError:
            return False


def _established(crd: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions", [])
    )


def main(argv: list[str]) -> int:
    """``python -m devstack.controlplane [DIR]``: start one, print how to reach it, wait."""
    workdir = Path(argv[0]) if argv else Path(".data/controlplane")
    plane = ControlPlane(workdir)
    try:
        plane.start()
    except (ComponentDied, KubeError) as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"{plane.server_version()} at {plane.url} in {plane.start_seconds:.1f} s")
    print(f"kubectl --kubeconfig {plane.admin_kubeconfig} get nodes")
    print("memory:", {k: round(v) for k, v in plane.memory_mib().items()})
    try:
        while not plane.failure:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        plane.stop()
    return 1 if plane.failure else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
