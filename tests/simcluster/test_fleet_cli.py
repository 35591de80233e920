"""Demo fleet contents, the generator, the subprocess helper and kubectl."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kubernetes import client, config

from simcluster import SimCluster
from simcluster.fleet import generate, load_fleet, write_fleet
from simcluster.testing import start_subprocess

from .helpers import Kubectl


def test_demo_fleet_properties(v1: client.CoreV1Api) -> None:
    nodes = {n.metadata.name: n for n in v1.list_node().items}
    unhealthy = [
        n
        for n, o in nodes.items()
        if o.status.allocatable.get("nvidia.com/gpu") != o.status.capacity.get("nvidia.com/gpu")
    ]
    assert unhealthy == ["h100-01"]
    l40s = nodes["l40s-00"]
    assert l40s.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-L40S-SHARED"
    assert l40s.metadata.labels["nvidia.com/gpu.replicas"] == "4"
    assert l40s.metadata.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert l40s.status.capacity["nvidia.com/gpu"] == "16"
    assert nodes["a100-02"].status.capacity["nvidia.com/mig-1g.10gb"] == "56"
    assert nodes["a100-03"].status.capacity["nvidia.com/mig-3g.40gb"] == "4"
    assert nodes["a100-03"].metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert nodes["h200-00"].metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    drivers = {
        o.metadata.labels["nvidia.com/cuda.driver-version.full"]
        for n, o in nodes.items()
        if n.startswith("a100")
    }
    assert len(drivers) == 2  # driver skew
    assert "nvidia.com/gpu" not in (nodes["cpu-00"].status.capacity or {})
    pods = v1.list_pod_for_all_namespaces().items
    pending = [p for p in pods if p.status.phase == "Pending"]
    assert pending and all(not p.spec.node_name for p in pending)
    assert any(p.status.phase == "Succeeded" for p in pods)
    assert {"ml-vision", "nlp-research", "genomics", "robotics"} <= {
        p.metadata.namespace for p in pods
    }


def test_generator_deterministic() -> None:
    a = generate(nodes=40, gpus_per_node=8, pods=400, gpu_pods=150, namespaces=7, seed=3)
    b = generate(nodes=40, gpus_per_node=8, pods=400, gpu_pods=150, namespaces=7, seed=3)
    assert json.dumps(a) == json.dumps(b)
    fleet = load_fleet(a)
    assert len(fleet.nodes) == 40 and len(fleet.pods) == 400
    assert len([n for n in fleet.namespaces if n["metadata"]["name"].startswith("team-")]) == 7
    # running GPU pods never exceed node allocatable
    alloc = {n["metadata"]["name"]: n["status"]["allocatable"] for n in fleet.nodes}
    used: dict[tuple[str, str], int] = {}
    phases = set()
    for p in fleet.pods:
        phases.add(p["status"]["phase"])
        if p["status"]["phase"] != "Running":
            continue
        for k, v in p["spec"]["containers"][0]["resources"].get("requests", {}).items():
            if k.startswith("nvidia.com/"):
                key = (p["spec"]["nodeName"], k)
                used[key] = used.get(key, 0) + int(v)
    for (node, res), n in used.items():
        assert n <= int(alloc[node][res])
    assert {"Running", "Pending", "Succeeded"} <= phases


def test_generate_cli_and_subprocess(tmp_path) -> None:
    out = tmp_path / "fleet.yaml"
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "simcluster",
            "generate",
            "--nodes",
            "20",
            "--pods",
            "100",
            "--gpu-pods",
            "40",
            "--namespaces",
            "5",
            "--seed",
            "1",
            "-o",
            str(out),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "generated" in r.stderr
    sim = start_subprocess(out)
    try:
        api = config.new_client_from_config(config_file=sim.kubeconfig)
        v1 = client.CoreV1Api(api)
        assert len(v1.list_node().items) == 20
        assert len(v1.list_pod_for_all_namespaces().items) == 100
        api.close()
    finally:
        sim.stop()
    assert sim.process.returncode is not None


def test_write_fleet_roundtrip(tmp_path) -> None:
    spec = generate(nodes=5, pods=10, gpu_pods=4, namespaces=2, seed=9)
    write_fleet(spec, tmp_path / "f.yaml")
    s = SimCluster.from_fleet(tmp_path / "f.yaml")
    assert s.counts()["pods"] == 10


def test_kubectl_smoke(sim: SimCluster, kubectl: Kubectl) -> None:
    assert "a100-00" in kubectl("get", "nodes").stdout
    assert "requests.nvidia.com/gpu" in kubectl("get", "resourcequota", "-A").stdout
    assert "tokenizer-train" in kubectl("get", "pods", "-A").stdout
    kubectl("label", "node", "v100-00", "foo=bar")
    assert sim.get("nodes", "v100-00")["metadata"]["labels"]["foo"] == "bar"
    assert "foo: bar" in kubectl("get", "node", "v100-00", "-o", "yaml").stdout
    kubectl("cordon", "v100-01")
    assert sim.get("nodes", "v100-01")["spec"]["unschedulable"] is True
    assert "SchedulingDisabled" in kubectl("get", "node", "v100-01").stdout


def test_advertised_host_is_in_the_kubeconfig_and_the_certificate(tmp_path) -> None:
    """docker-compose reaches the simulator as ``sim``: kubeconfigs must say so, and the
    pinned certificate must name it, or TLS verification (kubectl, the official client) fails."""
    import base64
    import socket
    import ssl

    import yaml
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    sim = start_subprocess(
        None, kubeconfig=tmp_path / "kc", extra_args=["--advertise", "sim.example"]
    )
    try:
        cluster = yaml.safe_load((tmp_path / "kc").read_text())["clusters"][0]["cluster"]
        port = int(sim.url.rsplit(":", 1)[1])
        assert cluster["server"] == f"https://sim.example:{port}"
        pem = base64.b64decode(cluster["certificate-authority-data"])
        cert = x509.load_pem_x509_certificate(pem)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "sim.example" in names.get_values_for_type(x509.DNSName)
        # The port serves exactly the pinned certificate: a client trusting it connects.
        ctx = ssl.create_default_context(cadata=pem.decode())
        ctx.check_hostname = False
        with socket.create_connection(("127.0.0.1", port)) as raw, ctx.wrap_socket(raw) as tls:
            assert tls.getpeercert(binary_form=True) == cert.public_bytes(Encoding.DER)
    finally:
        sim.stop()
