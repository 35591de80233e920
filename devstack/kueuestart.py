"""Kueue's controller manager on the local control plane (devstack/controlplane.py).

Its CRDs and webhook manifests come from the module the binary was built from (the cache's
``crds/`` and ``webhooks.yaml``); its webhooks are served on 127.0.0.1 under a certificate
of the harness' CA and registered with ``url`` client configs, since a Service needs a
cluster network that loopback has not. Only the integrations the portal uses are on. Its
visibility API is served where the machine has an address (devstack/kueuevisibility.py).
"""

from __future__ import annotations

import base64
import copy
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

from devstack import kueuevisibility
from devstack.kubeapi import wait_for

KUEUE_NAMESPACE = "kueue-system"
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
# Kueue's integrations the portal uses: plain pods (scheduling gate) and batch Jobs (suspend).
KUEUE_FRAMEWORKS = ("batch/job", "pod")
# Webhooks of config/components/webhook/manifests.yaml kept: those for Kueue's own kinds and
# the integrations above (the rest name kinds this cluster does not serve).
_KUEUE_WEBHOOK_GROUPS = {"kueue.x-k8s.io", "batch", ""}


def start(plane, ca, bin_dir: Path, logs: Path, began: float, timeout: float) -> None:
    """Kueue's namespace and CRDs, its controller manager, then its webhook configurations."""
    from devstack.components import ComponentDied, free_port
    from devstack.controlplane import _established

    api = plane.api
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
    for crd in sorted((plane.binaries / "crds").glob("*.yaml")):
        api.apply_documents(yaml.safe_load_all(crd.read_text()))
    webhook_port, health_port = free_port(), free_port()
    cert_dir = plane.workdir / "kueue-certs"
    cert_dir.mkdir(exist_ok=True)
    pair = ca.issue("kueue-webhook", "kueue-webhook", hosts=("127.0.0.1", "localhost"))
    shutil.copy(pair.cert, cert_dir / "tls.crt")
    shutil.copy(pair.key, cert_dir / "tls.key")
    # Without its internal cert management Kueue v0.17 reads the metrics server's
    # certificate from a fixed path (cmd/kueue/main.go, "metrics-cert-path") even with
    # metrics off; the webhook's pair serves there too.
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(pair.cert, KUEUE_METRICS_CERTS / "tls.crt")
        shutil.copy(pair.key, KUEUE_METRICS_CERTS / "tls.key")
    except OSError as exc:
        raise ComponentDied(
            f"Kueue needs {KUEUE_METRICS_CERTS} writable ({exc}); run as root or create "
            "it writable for this user"
        ) from exc
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
    }
    if plane.kueue_fair_sharing:
        # A non-nil fairSharing turns it on (Kueue v0.17 cmd/kueue/main.go: "if
        # cfg.FairSharing != nil"); ClusterQueues then report status.fairSharing.weightedShare
        # (pkg/controller/core/clusterqueue_controller.go). The strategies are Kueue's defaults.
        config["fairSharing"] = {
            "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
        }
    address = kueuevisibility.host_address()
    flags = []
    if address:
        visibility_port = free_port()
        kueuevisibility.install_certificate(ca)
        config["visibilityServer"] = kueuevisibility.config(address, visibility_port)
    else:
        # loopback only: no address an EndpointSlice accepts (devstack/kueuevisibility.py)
        flags.append("--feature-gates=VisibilityOnDemand=false")
    config_path = plane.workdir / "kueue-config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    kueue = plane._add(
        "kueue",
        [
            str(bin_dir / "kueue"),
            f"--config={config_path}",
            f"--kubeconfig={plane.admin_kubeconfig}",
            "--zap-log-level=info",
            *flags,
        ],
        logs,
    )
    # The CRDs must be established before Kueue's informers start.
    for crd in sorted((plane.binaries / "crds").glob("*.yaml")):
        name = yaml.safe_load(crd.read_text())["metadata"]["name"]
        wait_for(
            lambda name=name: _established(api.get("customresourcedefinitions", name)),
            timeout=timeout,
            what=f"CRD {name} established",
        )
    kueue.start()
    wait_for(
        lambda: (
            plane._alive_or_raise() and plane._http_ok(f"http://127.0.0.1:{health_port}/readyz")
        ),
        timeout=timeout,
        what="Kueue /readyz",
    )
    for doc in webhooks(plane, webhook_port):
        api.apply(doc)
    if address:
        kueuevisibility.register(api, KUEUE_NAMESPACE, address, visibility_port, timeout)
    kueue.started_s = time.monotonic() - began


def webhooks(plane, port: int) -> list[dict[str, Any]]:
    """Kueue's webhook configurations with ``url`` client configs on loopback."""
    source = plane.binaries / "webhooks.yaml"
    out = []
    for doc in yaml.safe_load_all(source.read_text()):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": "kueue-" + doc["metadata"]["name"]}
        kept = []
        for hook in doc.get("webhooks", []):
            groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if not groups <= _KUEUE_WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(plane.ca_pem).decode(),
            }
            if hook["name"] in {"mpod.kb.io", "vpod.kb.io"}:
                # config/components/webhook/kustomization.yaml's patch
                hook["namespaceSelector"] = {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system", KUEUE_NAMESPACE],
                        }
                    ]
                }
            kept.append(hook)
        doc["webhooks"] = kept
        out.append(doc)
    return out
