"""``python -m devstack.cluster``: a real control plane with a fleet, for the demo and benches.

The command line mirrors ``python -m simcluster`` so the demo starts either the same way::

    python -m devstack.cluster --fleet simcluster/fleets/demo.yaml --port 6443 \\
        --apply deploy/kubernetes/namespace.yaml --apply deploy/kubernetes/rbac.yaml \\
        --serviceaccount-kubeconfig \\
            gpu-quota-portal/gpu-quota-portal=.data/credentials/portal.kubeconfig \\
        --kubeconfig .data/kubeconfig

It starts :class:`devstack.controlplane.ControlPlane` in ``--workdir``, loads the fleet
through the GPU emulation (``gpuemu``), applies the manifests, runs the emulation's controllers,
writes the ServiceAccount kubeconfigs (tokens from the TokenRequest API) and then the
admin's kubeconfig last (its appearance means "ready"), and runs until SIGINT/SIGTERM or
until a component dies (exit status 1 with the component's log tail).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from devstack.components import ComponentDied, kubeconfig_yaml
from devstack.controlplane import ControlPlane
from devstack.kubeapi import KubeError, wait_for

OPERATOR_NAMESPACE = "gpu-operator"
TOKEN_SECONDS = 365 * 24 * 3600  # the demo's portal token outlives any demo session


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devstack.cluster", description=__doc__)
    ap.add_argument("--fleet", required=True, help="fleet YAML/JSON file")
    ap.add_argument("--workdir", default=".data/controlplane", help="certificates, etcd, logs")
    ap.add_argument("--port", type=int, default=0, help="kube-apiserver's port (0: a free one)")
    ap.add_argument("--kubeconfig", required=True, help="write the admin's kubeconfig here")
    ap.add_argument("--apply", action="append", default=[], help="manifest to apply first")
    ap.add_argument(
        "--serviceaccount-kubeconfig",
        action="append",
        default=[],
        metavar="NS/NAME=PATH",
        help="write a kubeconfig with a token of that ServiceAccount",
    )
    ap.add_argument("--no-kueue", action="store_true", help="do not run Kueue")
    ap.add_argument(
        "--kueue-fair-sharing", action="store_true",
        help="turn on Kueue's fair sharing (ClusterQueues report their weighted share)",
    )  # fmt: skip
    args = ap.parse_args(argv)

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    plane = ControlPlane(
        args.workdir, kueue=not args.no_kueue, kueue_fair_sharing=args.kueue_fair_sharing,
        port=args.port,
    )  # fmt: skip
    emulator = None
    try:
        plane.start()
        import gpuemu
        from simcluster.fleet import load_fleet

        api = plane.api
        fleet = load_fleet(args.fleet)
        gpuemu.load(api, fleet)
        # The GPU operator's namespace holds a Role of the portal's manifests (rbac.yaml).
        api.apply({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": OPERATOR_NAMESPACE}})  # fmt: skip
        for manifest in args.apply:
            api.apply_file(manifest)
        emulator = gpuemu.Emulator(api, gpuemu.Options.from_fleet(fleet))
        emulator.start()
        for spec in args.serviceaccount_kubeconfig:
            account, path = spec.split("=", 1)
            namespace, name = account.split("/", 1)
            wait_for(lambda n=name, ns=namespace: api.get("serviceaccounts", n, ns), what=account)
            token = api.issue_token(namespace, name, TOKEN_SECONDS)
            _write(Path(path), kubeconfig_yaml(plane.url, plane.ca_pem, name, token=token))
        _write(Path(args.kubeconfig), plane.admin_kubeconfig.read_text())
        print(
            f"control plane {plane.server_version()} (real) at {plane.url}, ready in "
            f"{plane.start_seconds:.1f} s; logs in {plane.workdir / 'logs'}",
            flush=True,
        )
        while not stop.wait(1):
            plane.check()
    except (ComponentDied, KubeError, TimeoutError) as exc:
        print(f"control plane: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if emulator is not None:
            emulator.stop()
        plane.stop()
    return 0


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
