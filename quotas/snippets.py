"""How to use a grant: the exact lines a pod needs to run on it (issue #21 section 5).

- ResourceQuota clusters count every GPU class of a resource together (GPU-FACTS.md
  section 1), so a grant of one class is used by asking for that class with a node
  selector on GFD's labels (the class's selector, e.g. ``nvidia.com/gpu.product``);
- Kueue clusters admit workloads submitted to the namespace's LocalQueue, named by the
  label ``kueue.x-k8s.io/queue-name`` on the Job (or the pod), and inject the admitted
  flavor's node labels themselves (GPU-FACTS.md section 7); a selector still picks the
  class when the queue has several;
- the resource is the grant's: ``nvidia.com/gpu``, or a MIG slice's own resource name
  (``nvidia.com/mig-1g.10gb`` under the mixed strategy);
- DRA clusters count devices per DeviceClass (quotas/dra.py): a pod asks through a
  ResourceClaimTemplate naming the class's DeviceClass, and its container refers to the
  claim (``resources.claims``); no node selector is needed, the DeviceClass picks the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class Snippet:
    key: str  # unique on a page: the namespace, resource and class
    title: str
    text: str


def grant_snippets(namespace, grants) -> list[Snippet]:
    """One snippet per (resource, class) of ``grants`` in ``namespace``, in their order."""
    seen, out = set(), []
    kueue = namespace.cluster.is_kueue
    for g in grants:
        cls = g.gpu_class if g.gpu_class_id else None
        key = (g.resource, g.gpu_class_id)
        if key in seen:
            continue
        seen.add(key)
        where = cls.name if cls else "any class"
        if namespace.cluster.is_dra and cls is not None:
            text = _dra_snippet(namespace, cls, g.resource)
            out.append(Snippet(f"use-{namespace.pk}-{len(out)}", f"{g.resource} of {where}", text))
            continue
        lines = ["metadata:", f"  namespace: {namespace.name}"]
        if kueue:
            lines += ["  labels:", f"    kueue.x-k8s.io/queue-name: {settings.KUEUE_LOCAL_QUEUE}"]
        lines.append("spec:")
        if cls is not None and cls.selector:
            lines.append("  nodeSelector:")
            lines += [f"    {k}: {v}" for k, v in sorted(cls.selector.items())]
        lines += [
            "  containers:",
            "  - name: main",
            "    resources:",
            "      limits:",
            f"        {g.resource}: 1",
        ]
        out.append(
            Snippet(
                f"use-{namespace.pk}-{len(out)}",
                f"{g.resource} of {where}",
                "\n".join(lines),
            )
        )
    return out


def _dra_snippet(namespace, cls, resource: str) -> str:
    from .dra import device_class_name

    name = "gpus"
    return "\n".join([
        "apiVersion: resource.k8s.io/v1",
        "kind: ResourceClaimTemplate",
        "metadata:",
        f"  name: {name}",
        f"  namespace: {namespace.name}",
        "spec:",
        "  spec:",
        "    devices:",
        "      requests:",
        f"      - name: {name}",
        f"        exactly: {{deviceClassName: {device_class_name(cls, resource)}, count: 1}}",
        "---",
        "# in the pod:",
        "spec:",
        f"  resourceClaims: [{{name: {name}, resourceClaimTemplateName: {name}}}]",
        "  containers:",
        "  - name: main",
        "    resources:",
        f"      claims: [{{name: {name}}}]",
    ])  # fmt: skip
