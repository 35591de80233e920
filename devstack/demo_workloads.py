"""What the demo's researchers run on the Kueue cluster, created as its admin would.

Demo tooling only (seed_demo calls it once the portal's queues exist): the portal itself
never creates pods. Pods name their GPU class by node selector; Kueue's LocalQueue
``default`` in each namespace catches them, and a Job is queued suspended.
"""

from __future__ import annotations

import time

PRODUCT = "nvidia.com/gpu.product"
H100, V100 = "NVIDIA-H100-80GB-HBM3", "Tesla-V100-SXM2-16GB"
# namespace, pod name, product, GPUs, in the order Kueue admits them (by creation time)
PODS = [
    ("ml-vision", "detr-train-0", H100, 4),
    ("ml-vision", "detr-train-1", H100, 4),
    ("ml-vision", "detr-train-2", H100, 4),  # borrows nlp's idle H100s in the cohort
    ("ml-vision", "sam-finetune", H100, 8),  # waits: nothing left to borrow
    ("nlp-research", "eval-sweep-0", V100, 4),
]
JOB = ("nlp-research", "llm-pretrain", H100, 8)  # a queued, suspended Job (no pod yet)


def create(admin_kubeconfig: str) -> None:
    """What researchers submit, as the cluster's admin creates it (demo only: the portal
    itself never creates pods)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=admin_kubeconfig)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)

    def container(gpus: int) -> dict:
        res = {"nvidia.com/gpu": str(gpus), "cpu": "4", "memory": "32Gi"}
        limits = {"nvidia.com/gpu": str(gpus)}
        return {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "resources": {"requests": res, "limits": limits}}  # fmt: skip

    try:
        for namespace, name, product, gpus in PODS:
            body = {"metadata": {"name": name, "labels": {"app": name.rsplit("-", 1)[0]}},
                    "spec": {"nodeSelector": {PRODUCT: product},
                             "containers": [container(gpus)]}}  # fmt: skip
            try:
                core.create_namespaced_pod(namespace, body)
            except ApiException as err:
                if err.status != 409:
                    raise
            time.sleep(0.2)  # admitted in this order (Kueue orders by creation time)
        namespace, name, product, gpus = JOB
        job = {"metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "default"}},
               "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                   "restartPolicy": "Never", "nodeSelector": {PRODUCT: product},
                   "containers": [container(gpus)]}}}}  # fmt: skip
        try:
            batch.create_namespaced_job(namespace, job)
        except ApiException as err:
            if err.status != 409:
                raise
        time.sleep(1.0)  # let Kueue admit and the kubelets start what fits
    finally:
        api.close()
