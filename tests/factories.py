"""Small builders for inventory rows, for tests that do not need a cluster to sync from."""

from __future__ import annotations

import itertools

from inventory.models import Cluster, GpuPod, Node, NodeResource

_seq = itertools.count(1)


def make_cluster(slug: str | None = None, **kw) -> Cluster:
    n = next(_seq)
    slug = slug or f"cluster-{n}"
    defaults = {
        "name": slug.replace("-", " ").title(),
        "auth_method": Cluster.AuthMethod.KUBECONFIG,
        "kubeconfig_path": "/nonexistent/kubeconfig",
    }
    defaults.update(kw)
    return Cluster.objects.create(slug=slug, **defaults)


def make_node(
    cluster: Cluster,
    name: str | None = None,
    *,
    product: str = "NVIDIA-A100-SXM4-80GB",
    gpus: int = 8,
    resources: dict[str, tuple[int, int, int]] | None = None,
    **kw,
) -> Node:
    """A node with ``resources`` as {resource: (capacity, allocatable, requested)}."""
    name = name or f"node-{next(_seq)}"
    fields = {
        "gpu_product": product,
        "gpu_count": gpus if product else 0,
        "labels": {"nvidia.com/gpu.product": product} if product else {},
        "fingerprint": "test",
    }
    fields.update(kw)
    node = Node.objects.create(cluster=cluster, name=name, **fields)
    if resources is None:
        resources = {"nvidia.com/gpu": (gpus, gpus, 0)} if product else {}
    NodeResource.objects.bulk_create(
        NodeResource(node=node, resource=r, capacity=c, allocatable=a, requested=q)
        for r, (c, a, q) in resources.items()
    )
    return node


def make_pod(node: Node, name: str, namespace: str = "ml-vision", gpus: int = 1, **kw) -> GpuPod:
    fields = {
        "node": node,
        "node_name": node.name,
        "phase": "Running",
        "requests": {"nvidia.com/gpu": gpus},
    }
    fields.update(kw)
    return GpuPod.objects.create(cluster=node.cluster, namespace=namespace, name=name, **fields)
