"""Fleet files: a compact YAML/JSON description of a cluster, expanded into API objects.

Schema (all keys optional except names)::

    cluster: {name: demo, kubeletVersion: v1.32.4}
    nodes:                       # node groups
      - name: a100-{i:02d}       # str.format pattern with i (start at `start`, default 0)
        count: 2
        instanceType: p4d.24xlarge
        cpu: 96                  # capacity; allocatable = capacity
        memory: 1152Gi
        maxPods: 110
        labels: {}, annotations: {}, taints: [], unschedulable: false, ready: true
        gpu:
          product: NVIDIA-A100-SXM4-80GB
          count: 8
          driver: 550.107.02
          unhealthy: 1           # allocatable = capacity - unhealthy devices
          sharing: {strategy: time-slicing, replicas: 4}
          mig: {strategy: mixed, config: all-1g.10gb, layout: [{devices: [0, 1], ...}]}
    namespaces: [{name: ml-vision, labels: {team: vision}}]
    quotas: [{name: gpu-quota, namespace: ml-vision, hard: {requests.nvidia.com/gpu: 16}}]
    pods:                        # one container "main" unless `containers` is given
      - {name: train, namespace: ml-vision, node: a100-00, phase: Running,
         requests: {nvidia.com/gpu: 4, cpu: 8}, priorityClassName: high,
         age: 3h}                # created (and started) 3 hours before the fleet loads
      - {name: wait, namespace: ml-vision, phase: Pending, requests: {nvidia.com/gpu: 8},
         nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3},
         schedule: true,         # the real control plane's scheduler places it (or says why
         message: "0/2 ..."}     # not); the simulator, which has none, shows `message`
    configmaps: [{name: x, namespace: y, data: {k: v}}]
    gpuOperator:                 # the GPU Operator's ClusterPolicy (simcluster/gpuoperator.py);
      namespace: gpu-operator    # absent: installed with these defaults; false: not installed
      migStrategy: single        # spec.mig.strategy
      migConfigName: ""          # spec.migManager.config.name ("" : generated configs)
      migConfigDefault: all-disabled  # spec.migManager.config.default
      migManagerEnabled: true    # spec.migManager.enabled
      withReboot: false          # spec.migManager.env WITH_REBOOT
      configMountDelay: 60       # seconds until a ConfigMap write reaches mig-manager's file
      devicePluginRestart: 5     # seconds from mig.config.state=success to new allocatable
      clientPauseTimeout: 300    # seconds mig-manager waits for GPU clients to go
    priorityClasses: [{name: high, value: 1000}]
    generate: {nodes: 100, pods: 1000, ...}   # append a generated fleet (see generate())
    dra: false                   # true: GPUs through NVIDIA's DRA driver (real control plane)

A JSON document is valid input too and is parsed with ``json`` (much faster than YAML for
generated fleets with 150,000 pods).
"""

from __future__ import annotations

import contextlib
import gc
import json
import random
import re
import sys
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from simcluster import pods as podstatus
from simcluster.gpu import gpu_resources_and_labels, product, resolve_layout
from simcluster.quantity import canonicalize

DEFAULT_DRIVER = "550.107.02"
KUBELET_VERSION = "v1.32.4"
# The labels the GPU Operator puts on a GPU node for container workloads (NVIDIA/gpu-operator
# controllers/state_manager.go gpuStateLabels[container]): "client" is the one third-party
# GPU clients (the portal's agent) select on so mig-manager can pause them; there is no
# nvsm label there (mig-manager writes one when it pauses operands).
DEPLOY_OPERANDS = (
    "client",
    "container-toolkit",
    "dcgm",
    "dcgm-exporter",
    "device-plugin",
    "driver",
    "gpu-feature-discovery",
    "node-status-exporter",
    "operator-validator",
)
UNHEALTHY_ANNOTATION = "simcluster.io/unhealthy-gpus"


@dataclass
class Fleet:
    """Expanded API objects, ready to be stored."""

    name: str = "simcluster"
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    resourcequotas: list[dict[str, Any]] = field(default_factory=list)
    configmaps: list[dict[str, Any]] = field(default_factory=list)
    priorityclasses: list[dict[str, Any]] = field(default_factory=list)
    # the fleet's ``gpuOperator`` key (None: ``false``, not installed); simcluster/gpuoperator.py
    gpu_operator: dict[str, Any] | None = field(default_factory=dict)
    # the fleet's ``kueue`` key (false: no Kueue webhooks/controllers); simcluster/kueue.py
    kueue: Any = True
    # (namespace, name) of Pending pods with ``schedule: true``: on a real control plane the
    # scheduler decides (gpuemu/load.py); other unscheduled Pending pods are held as written
    scheduled: set[tuple[str, str]] = field(default_factory=set)
    # ``dra: true``: NVIDIA's DRA driver publishes the GPUs (gpuemu/dra.py), the device
    # plugin is off, so nodes advertise no nvidia.com/gpu or nvidia.com/mig-* resources
    dra: bool = False


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_AGE = re.compile(r"^(\d+)([smhd])$")


def aged(age: Any, ts: str) -> str:
    """``ts`` moved back by a fleet file's ``age`` ("90m", "3h", "2d"; absent: ``ts``)."""
    if not age:
        return ts
    m = _AGE.match(str(age))
    if not m:
        raise ValueError(f"age {age!r}: use a number and s, m, h or d, e.g. 3h")
    seconds = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    then = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (then - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_fleet_file(path: str | Path) -> dict[str, Any]:
    """Read a fleet file: JSON fast path, else YAML with the C loader when available."""
    text = Path(path).read_text()
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(text, Loader=loader)  # noqa: S506 - safe loader
    return data or {}


def load_fleet(src: str | Path | dict[str, Any] | None) -> Fleet:
    """Expand a fleet file or dict into API objects."""
    if src is None:
        spec: dict[str, Any] = {}
    elif isinstance(src, dict):
        spec = src
    else:
        spec = read_fleet_file(src)
    return expand(spec)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a fleet is built or stored: every object made
    survives, so each collection would only walk the growing heap again (150,000 pods:
    about half the load time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def expand(spec: dict[str, Any]) -> Fleet:
    """Turn the compact schema into full objects (uids, timestamps, GFD labels, status)."""
    with paused_gc():
        return _expand(spec)


def _expand(spec: dict[str, Any]) -> Fleet:
    fleet = Fleet(name=(spec.get("cluster") or {}).get("name", "simcluster"))
    op = spec.get("gpuOperator", {})
    fleet.gpu_operator = None if op is False else dict(op or {})
    fleet.kueue = spec.get("kueue", True)
    fleet.dra = bool(spec.get("dra", False))
    gen = spec.get("generate")
    if gen:
        generated = generate(**gen)
        spec = {**spec}
        for k in ("nodes", "namespaces", "quotas", "pods"):
            spec[k] = list(spec.get(k) or []) + generated[k]
    ts = now_iso()
    kubelet = (spec.get("cluster") or {}).get("kubeletVersion", KUBELET_VERSION)
    seen_ns: set[str] = set()
    for ns in spec.get("namespaces") or []:
        ns = {"name": ns} if isinstance(ns, str) else ns
        fleet.namespaces.append(namespace_object(ns["name"], ns.get("labels"), ts))
        seen_ns.add(ns["name"])
    for group in spec.get("nodes") or []:
        count = int(group.get("count", 1))
        start = int(group.get("start", 0))
        pattern = group["name"]
        for i in range(start, start + count):
            name = pattern.format(i=i) if "{" in pattern else pattern
            if count > 1 and "{" not in pattern:
                name = f"{pattern}-{i}"
            fleet.nodes.append(node_object(name, group, ts, kubelet))
    if fleet.dra:  # the DRA driver owns the GPUs: no device plugin resources
        for node in fleet.nodes:
            for key in ("capacity", "allocatable"):
                res = node["status"][key]
                for r in [r for r in res if r.startswith(("nvidia.com/gpu", "nvidia.com/mig-"))]:
                    del res[r]
    kubelets = _pod_networks(fleet.nodes)
    for q in spec.get("quotas") or []:
        fleet.resourcequotas.append(quota_object(q, ts))
    for cm in spec.get("configmaps") or []:
        fleet.configmaps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(cm["name"], cm.get("namespace", "default"), ts, cm),
                "data": {k: str(v) for k, v in (cm.get("data") or {}).items()},
            }
        )
    for pc in spec.get("priorityClasses") or []:
        fleet.priorityclasses.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": _meta(pc["name"], "", ts, pc),
                "value": int(pc.get("value", 0)),
                "globalDefault": bool(pc.get("globalDefault", False)),
                "preemptionPolicy": pc.get("preemptionPolicy", "PreemptLowerPriority"),
            }
        )
    for p in spec.get("pods") or []:
        count = int(p.get("count", 1))
        born = aged(p.get("age"), ts)  # a pod that has run for a while (idle insight, history)
        if count == 1:
            fleet.pods.append(pod_object(p, born, kubelets))
        else:
            for i in range(count):
                fleet.pods.append(pod_object({**p, "name": p["name"].format(i=i)}, born, kubelets))
        if p.get("schedule"):
            fleet.scheduled |= {
                (q["metadata"]["namespace"], q["metadata"]["name"]) for q in fleet.pods[-count:]
            }
    for obj in fleet.pods + fleet.resourcequotas + fleet.configmaps:
        ns = obj["metadata"]["namespace"]
        if ns not in seen_ns:
            seen_ns.add(ns)
            fleet.namespaces.append(namespace_object(ns, None, ts))
    return fleet


def _meta(name: str, namespace: str, ts: str, src: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["uid"] = new_uid()
    meta["creationTimestamp"] = ts
    if src.get("labels"):
        meta["labels"] = {k: str(v) for k, v in src["labels"].items()}
    if src.get("annotations"):
        meta["annotations"] = {k: str(v) for k, v in src["annotations"].items()}
    return meta


def namespace_object(name: str, labels: dict[str, Any] | None, ts: str) -> dict[str, Any]:
    """A Namespace with the automatic ``kubernetes.io/metadata.name`` label."""
    lb = {"kubernetes.io/metadata.name": name}
    lb.update({k: str(v) for k, v in (labels or {}).items()})
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": new_uid(),
            "creationTimestamp": ts,
            "labels": lb,
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def node_object(name: str, group: dict[str, Any], ts: str, kubelet: str) -> dict[str, Any]:
    """A Node with GFD labels, GPU capacity/allocatable and a Ready condition."""
    labels: dict[str, str] = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
    }
    if group.get("instanceType"):
        labels["node.kubernetes.io/instance-type"] = str(group["instanceType"])
    if group.get("zone"):
        labels["topology.kubernetes.io/zone"] = str(group["zone"])
    annotations: dict[str, str] = {"node.alpha.kubernetes.io/ttl": "0"}
    cpu = canonicalize(group.get("cpu", 64))
    memory = canonicalize(group.get("memory", "512Gi"))
    capacity: dict[str, str] = {
        "cpu": cpu,
        "memory": memory,
        "ephemeral-storage": canonicalize(group.get("ephemeralStorage", "1Ti")),
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "pods": canonicalize(group.get("maxPods", 110)),
    }
    allocatable = dict(capacity)
    gpu = group.get("gpu")
    if gpu:
        caps, alloc, gl = gpu_node_state(gpu)
        labels.update(gl)
        capacity.update({k: canonicalize(v) for k, v in caps.items()})
        allocatable.update({k: canonicalize(v) for k, v in alloc.items()})
        if gpu.get("unhealthy"):
            annotations[UNHEALTHY_ANNOTATION] = str(gpu["unhealthy"])
    labels.update({k: str(v) for k, v in (group.get("labels") or {}).items()})
    annotations.update({k: str(v) for k, v in (group.get("annotations") or {}).items()})
    ready = bool(group.get("ready", True))
    spec: dict[str, Any] = {"providerID": f"sim://{name}"}
    if group.get("unschedulable"):
        spec["unschedulable"] = True
    if group.get("taints"):
        spec["taints"] = list(group["taints"])
    conditions = [
        _cond("MemoryPressure", "False", "KubeletHasSufficientMemory", ts),
        _cond("DiskPressure", "False", "KubeletHasNoDiskPressure", ts),
        _cond("PIDPressure", "False", "KubeletHasSufficientPID", ts),
        _cond(
            "Ready",
            "True" if ready else "False",
            "KubeletReady" if ready else "KubeletNotReady",
            ts,
        ),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": new_uid(),
            "creationTimestamp": ts,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": _fake_ip(name)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name + "-boot")),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "5.15.0-119-generic",
                "kubeProxyVersion": kubelet,
                "kubeletVersion": kubelet,
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, name).hex,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.4 LTS",
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name + "-sys")),
            },
        },
    }


def gpu_node_state(
    gpu: dict[str, Any], configs: dict[str, Any] | None = None
) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
    """(capacity, allocatable, labels) for a node's ``gpu`` block."""
    prod = product(gpu["product"])
    count = int(gpu.get("count", 8))
    sharing = gpu.get("sharing") or {}
    replicas = int(sharing.get("replicas", 1))
    strategy_sharing = sharing.get("strategy", "none") if replicas > 1 else "none"
    mig = gpu.get("mig") or {}
    strategy = mig.get("strategy", "none")
    config = mig.get("config", "all-disabled" if prod.mig else "")
    layout = None
    if prod.mig:
        custom = dict(configs or {})
        if mig.get("layout"):
            custom[config] = mig["layout"]
        layout = resolve_layout(prod, config, count, custom)
    caps, labels = gpu_resources_and_labels(
        prod,
        count,
        driver=str(gpu.get("driver", DEFAULT_DRIVER)),
        cuda_runtime=str(gpu.get("cudaRuntime", "12.4")),
        strategy=strategy,
        layout=layout,
        replicas=replicas,
        sharing=strategy_sharing,
    )
    for op in DEPLOY_OPERANDS:
        labels[f"nvidia.com/gpu.deploy.{op}"] = "true"
    if prod.mig:
        labels["nvidia.com/gpu.deploy.mig-manager"] = "true"
        labels["nvidia.com/mig.config"] = config
        labels["nvidia.com/mig.config.state"] = "success"
    labels["nvidia.com/gfd.timestamp"] = str(int(datetime.now(UTC).timestamp()))
    alloc = dict(caps)
    unhealthy = int(gpu.get("unhealthy", 0))
    if unhealthy and "nvidia.com/gpu" in alloc:
        alloc["nvidia.com/gpu"] = max(0, alloc["nvidia.com/gpu"] - unhealthy * replicas)
    return caps, alloc, labels


def _cond(kind: str, status: str, reason: str, ts: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": f"kubelet: {reason}",
        "lastHeartbeatTime": ts,
        "lastTransitionTime": ts,
    }


def _fake_ip(name: str) -> str:
    h = zlib.crc32(name.encode())
    return f"10.{(h >> 16) & 255}.{(h >> 8) & 255}.{(h & 253) + 1}"


def new_uid() -> str:
    """A random version-4 UUID string (cheaper than ``uuid.uuid4()`` for 150k objects)."""
    h = f"{random.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def _resources(req: dict[str, Any] | None, lim: dict[str, Any] | None) -> dict[str, Any]:
    """Container resources in canonical form; extended resources get limits = requests
    (the API requires both, equal)."""
    requests = {k: canonicalize(v) for k, v in (req or {}).items()}
    limits = {k: canonicalize(v) for k, v in (lim or {}).items()}
    for k, v in requests.items():
        if "/" in k and "kubernetes.io/" not in k:
            limits.setdefault(k, v)
    for k, v in limits.items():
        requests.setdefault(k, v)
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def pod_object(
    p: dict[str, Any], ts: str, kubelets: dict[str, list[Any]] | None = None
) -> dict[str, Any]:
    """A Pod from the compact schema (``requests``/``limits`` or ``containers``)."""
    image = p.get("image", "nvcr.io/nvidia/pytorch:24.05-py3")
    if p.get("containers"):
        containers = [
            {
                "name": c.get("name", f"c{i}"),
                "image": c.get("image", image),
                "resources": _resources(c.get("requests"), c.get("limits")),
            }
            for i, c in enumerate(p["containers"])
        ]
    else:
        containers = [
            {
                "name": "main",
                "image": image,
                "resources": _resources(p.get("requests"), p.get("limits")),
            }
        ]
    spec: dict[str, Any] = {"containers": containers}
    if p.get("initContainers"):
        spec["initContainers"] = [
            {
                "name": c.get("name", f"init{i}"),
                "image": c.get("image", image),
                "resources": _resources(c.get("requests"), c.get("limits")),
                **({"restartPolicy": c["restartPolicy"]} if c.get("restartPolicy") else {}),
            }
            for i, c in enumerate(p["initContainers"])
        ]
    node = p.get("node") or ""
    if node:
        spec["nodeName"] = node
    if p.get("priorityClassName"):
        spec["priorityClassName"] = p["priorityClassName"]
    if p.get("nodeSelector"):
        spec["nodeSelector"] = {str(k): str(v) for k, v in p["nodeSelector"].items()}
    if p.get("overhead"):
        spec["overhead"] = {k: canonicalize(v) for k, v in p["overhead"].items()}
    spec.update(
        {
            "restartPolicy": p.get("restartPolicy", "Always"),
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "serviceAccount": "default",  # v1's deprecated alias, always echoed
            "terminationGracePeriodSeconds": 30,
        }
    )
    phase = p.get("phase") or ("Running" if node else "Pending")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(p["name"], p["namespace"], ts, p),
        "spec": spec,
    }
    pod["status"] = _pod_status(pod, phase, node, ts, kubelets, p.get("message"))
    return pod


def _pod_networks(nodes: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Give every fleet node its pod CIDR (what the node IPAM controller wrote when it
    registered) and return the kubelet view: name -> [InternalIP, pod CIDR, pods so far]."""
    out: dict[str, list[Any]] = {}
    for i, node in enumerate(nodes):
        cidr = podstatus.node_pod_cidr(i)
        node["spec"] = {"podCIDR": cidr, "podCIDRs": [cidr], **node["spec"]}
        host, _ = podstatus.node_addresses(node)
        out[node["metadata"]["name"]] = [host, cidr, 0]
    return out


def _pod_status(
    pod: dict[str, Any],
    phase: str,
    node: str,
    ts: str,
    kubelets: dict[str, list[Any]] | None,
    message: str | None,
) -> dict[str, Any]:
    """The status the fleet's cluster shows: a scheduler's Unschedulable for pods without a
    node, else what the node's kubelet posted (pods.py): started, still creating, or
    exited (Succeeded exit 0, Failed exit 1). Pod IPs are handed out per node in order."""
    spec = pod["spec"]
    if not node:
        status: dict[str, Any] = {"phase": phase}
        if phase == "Pending":
            reason = message or "0/1 nodes are available: insufficient nvidia.com/gpu."
            status["conditions"] = [
                podstatus.cond("PodScheduled", "False", ts, "Unschedulable", reason)
            ]
        status["qosClass"] = podstatus.qos(spec)
        return status
    net = (kubelets or {}).get(node)
    if net is None:  # a node the fleet does not have: its address as fleets derive them
        net = [_fake_ip(node), podstatus.fallback_pod_cidr(node), 0]
        if kubelets is not None:
            kubelets[node] = net
    host, cidr = net[0], net[1]
    if phase == "Pending":
        return podstatus.creating_status(pod, ts, host)
    ip = podstatus.pod_ip(cidr, net[2])
    net[2] += 1
    running = podstatus.started_status(pod, ts, host, ip, shared=True)
    if phase == "Running":
        return running
    if phase in ("Succeeded", "Failed"):
        ended = {**pod, "status": running}
        return podstatus.terminated_status(ended, phase, 0 if phase == "Succeeded" else 1, ts)
    return {**running, "phase": phase}


def quota_object(q: dict[str, Any], ts: str) -> dict[str, Any]:
    """A ResourceQuota; ``status`` is filled by the quota controller after load."""
    spec: dict[str, Any] = {"hard": {k: canonicalize(v) for k, v in (q.get("hard") or {}).items()}}
    if q.get("scopes"):
        spec["scopes"] = list(q["scopes"])
    if q.get("scopeSelector"):
        spec["scopeSelector"] = q["scopeSelector"]
    obj = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(q["name"], q.get("namespace", "default"), ts, q),
        "spec": spec,
    }
    return obj


# ------------------------------------------------------------------ generator

_NODE_KINDS: list[tuple[str, float, dict[str, Any]]] = [
    ("a100", 0.30, {"product": "NVIDIA-A100-SXM4-80GB", "instanceType": "p4de.24xlarge"}),
    (
        "a100mig",
        0.05,
        {
            "product": "NVIDIA-A100-SXM4-80GB",
            "instanceType": "p4de.24xlarge",
            "mig": {"strategy": "mixed", "config": "all-1g.10gb"},
        },
    ),
    ("h100", 0.25, {"product": "NVIDIA-H100-80GB-HBM3", "instanceType": "p5.48xlarge"}),
    ("h200", 0.10, {"product": "NVIDIA-H200", "instanceType": "p5e.48xlarge"}),
    ("v100", 0.10, {"product": "Tesla-V100-SXM2-16GB", "instanceType": "p3.16xlarge"}),
    (
        "l40s",
        0.10,
        {
            "product": "NVIDIA-L40S",
            "instanceType": "g6e.48xlarge",
            "sharing": {"strategy": "time-slicing", "replicas": 4},
        },
    ),
    ("cpu", 0.10, {"instanceType": "m7i.24xlarge"}),
]


def generate(
    nodes: int = 100,
    gpus_per_node: int = 8,
    pods: int = 1000,
    gpu_pods: int = 300,
    namespaces: int = 20,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Generate a large heterogeneous fleet in the compact schema, deterministically.

    Running GPU pods never exceed a node's allocatable; some GPU pods are Pending (no node)
    and some Succeeded. Every namespace stays under 3,000 pods when the numbers allow it.
    """
    rng = random.Random(seed)
    say = progress or (lambda _msg: None)
    groups: list[dict[str, Any]] = []
    placed: list[tuple[str, str, int, int]] = []  # name, gpu resource, free, slots
    counts = [int(nodes * weight) for _, weight, _ in _NODE_KINDS]
    counts[0] += nodes - sum(counts)
    max_pods = max(110, -(-pods * 3 // max(1, nodes * 2)))
    for (kind, _, tmpl), n in zip(_NODE_KINDS, counts, strict=True):
        if n <= 0:
            continue
        base: dict[str, Any] = {
            "instanceType": tmpl["instanceType"],
            "cpu": 96 if kind != "cpu" else 48,
            "memory": "1152Gi" if kind != "cpu" else "384Gi",
            "maxPods": max_pods,
            "zone": f"zone-{len(groups) % 3}",
        }
        gpu = None
        if kind != "cpu":
            gpu = {"product": tmpl["product"], "count": gpus_per_node, "driver": DEFAULT_DRIVER}
            for k in ("mig", "sharing"):
                if k in tmpl:
                    gpu[k] = tmpl[k]
        n_unhealthy = max(1, n // 200) if gpu and n >= 3 else 0
        n_skew = 1 if gpu and n >= 3 else 0
        parts = [(n - n_unhealthy - n_skew, {}), (n_skew, {"driver": "535.183.01"})]
        parts.append((n_unhealthy, {"unhealthy": 1}))
        start = 0
        for m, override in parts:
            if m <= 0:
                continue
            group = {**base, "name": f"{kind}-{{i:05d}}", "count": m, "start": start}
            if gpu:
                group["gpu"] = {**gpu, **override}
            groups.append(group)
            for i in range(start, start + m):
                name = f"{kind}-{i:05d}"
                if gpu:
                    g = group["gpu"]
                    replicas = (g.get("sharing") or {}).get("replicas", 1)
                    free = (gpus_per_node - g.get("unhealthy", 0)) * replicas
                    res = "nvidia.com/gpu"
                    if g.get("mig"):
                        res, free = "nvidia.com/mig-1g.10gb", gpus_per_node * 7
                    placed.append((name, res, free, max_pods))
                else:
                    placed.append((name, "", 0, max_pods))
            start += m
    say(f"generated {nodes} nodes in {len(groups)} groups")
    ns_names = [f"team-{i:04d}" for i in range(namespaces)]
    ns_list = [
        {"name": n, "labels": {"team": n, "portal.example.com/managed": "true"}} for n in ns_names
    ]
    ns_count = dict.fromkeys(ns_names, 0)
    ns_gpu: dict[str, int] = dict.fromkeys(ns_names, 0)
    cap = max(3000, -(-pods // max(1, namespaces)) + 1)

    def pick_ns() -> str:
        for _ in range(20):
            n = ns_names[min(int(rng.paretovariate(1.2)) - 1, namespaces - 1) % namespaces]
            n = ns_names[rng.randrange(namespaces)] if rng.random() < 0.7 else n
            if ns_count[n] < cap:
                ns_count[n] += 1
                return n
        n = min(ns_count, key=ns_count.__getitem__)
        ns_count[n] += 1
        return n

    free = {name: [res, f, slots] for name, res, f, slots in placed}
    gpu_nodes = [name for name, res, _, _ in placed if res]
    all_nodes = [name for name, _, _, _ in placed]
    pod_list: list[dict[str, Any]] = []
    sizes = [s for s in (1, 1, 1, 2, 2, 4, 8) if s <= max(1, gpus_per_node)]
    for i in range(gpu_pods):
        ns = pick_ns()
        roll = rng.random()
        size = rng.choice(sizes)
        pod: dict[str, Any] = {
            "name": f"gpu-job-{i:06d}",
            "namespace": ns,
            "labels": {"app": f"job-{i % 97}", "team": ns},
        }
        node = None
        if roll >= 0.02 and gpu_nodes:
            for _ in range(30):
                cand = gpu_nodes[rng.randrange(len(gpu_nodes))]
                st = free[cand]
                need = 1 if st[0] != "nvidia.com/gpu" else size
                if st[1] >= need and st[2] > 0:
                    node = cand
                    break
        if node is None:
            pod["phase"] = "Pending"
            pod["requests"] = {"nvidia.com/gpu": size, "cpu": 4 * size, "memory": f"{32 * size}Gi"}
            ns_gpu[ns] += size
        else:
            st = free[node]
            need = 1 if st[0] != "nvidia.com/gpu" else size
            pod["node"] = node
            pod["requests"] = {st[0]: need, "cpu": 4 * need, "memory": f"{32 * need}Gi"}
            if roll > 0.97:
                pod["phase"] = "Succeeded"
            else:
                pod["phase"] = "Running"
                st[1] -= need
                st[2] -= 1
                if st[0] == "nvidia.com/gpu":
                    ns_gpu[ns] += need
        pod_list.append(pod)
        if i and i % 50_000 == 0:
            say(f"generated {i} GPU pods")
    say(f"generated {gpu_pods} GPU pods")
    for i in range(max(0, pods - gpu_pods)):
        ns = pick_ns()
        roll = rng.random()
        pod = {
            "name": f"svc-{i:06d}",
            "namespace": ns,
            "labels": {"app": f"svc-{i % 251}", "team": ns},
            "requests": {"cpu": "500m" if i % 3 else "2", "memory": "1Gi" if i % 2 else "4Gi"},
            "image": "python:3.11-slim",
        }
        if roll < 0.01:
            pod["phase"] = "Pending"
        else:
            for _ in range(30):
                cand = all_nodes[rng.randrange(len(all_nodes))] if all_nodes else None
                if cand and free[cand][2] > 0:
                    pod["node"] = cand
                    free[cand][2] -= 1
                    break
            pod["phase"] = (
                "Succeeded" if roll > 0.97 else ("Running" if "node" in pod else "Pending")
            )
        pod_list.append(pod)
        if i and i % 50_000 == 0:
            say(f"generated {i} CPU pods")
    say(f"generated {len(pod_list)} pods in {namespaces} namespaces")
    quotas = []
    for idx, ns in enumerate(ns_names):
        if idx % 10 == 9:
            continue  # some namespaces have no quota yet
        hard = max(4, ns_gpu[ns] + rng.choice((0, 4, 8, 16)))
        quotas.append(
            {
                "name": "gpu-quota",
                "namespace": ns,
                "hard": {"requests.nvidia.com/gpu": hard, "count/pods": 5000},
            }
        )
    return {
        "cluster": {"name": f"generated-{seed}"},
        "nodes": groups,
        "namespaces": ns_list,
        "quotas": quotas,
        "pods": pod_list,
    }


def write_fleet(spec: dict[str, Any], path: str | Path) -> None:
    """Write a fleet as JSON (one pod per line): valid YAML, and fast to load."""
    with open(path, "w") as fh:
        fh.write("{\n")
        keys = list(spec)
        for ki, k in enumerate(keys):
            v = spec[k]
            fh.write(f"{json.dumps(k)}: ")
            if isinstance(v, list):
                fh.write("[\n")
                for i, item in enumerate(v):
                    fh.write("  " + json.dumps(item, separators=(", ", ": ")))
                    fh.write(",\n" if i < len(v) - 1 else "\n")
                fh.write("]")
            else:
                fh.write(json.dumps(v))
            fh.write(",\n" if ki < len(keys) - 1 else "\n")
        fh.write("}\n")


def main_generate(argv: list[str]) -> int:
    """``python -m simcluster generate ...``"""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m simcluster generate")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--gpu-pods", type=int, default=300)
    ap.add_argument("--namespaces", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    spec = generate(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        pods=args.pods,
        gpu_pods=args.gpu_pods,
        namespaces=args.namespaces,
        seed=args.seed,
        progress=lambda m: print(m, file=sys.stderr, flush=True),
    )
    write_fleet(spec, args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
