"""What the demo's researchers run on the DRA cluster, created as its admin would.

Demo tooling only (seed_demo calls it once the portal's DeviceClasses and quotas exist):
the portal itself never creates claims or pods. Each pod asks for GPUs through a
ResourceClaimTemplate naming its class's DeviceClass (quotas/dra.py); one asks for more
than its team was granted, so the ResourceQuota refuses its claim and the waiting page
says why.
"""

from __future__ import annotations

RESOURCE_API = "resource.k8s.io/v1"


def claim_template(name: str, device_class: str, count: int) -> dict:
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": device_class, "count": count}}]}}},
    }  # fmt: skip


def pod(name: str, template: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name.rsplit("-", 1)[0]}},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [{
                "name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "resources": {"requests": {"cpu": "4", "memory": "32Gi"},
                              "claims": [{"name": "gpus"}]},
            }],
        },
    }  # fmt: skip


def create(admin_kubeconfig: str, workloads: list[tuple[str, str, str, int]]) -> None:
    """``workloads``: (namespace, pod name, DeviceClass, devices); a template per pod."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=admin_kubeconfig)
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    try:
        for namespace, name, device_class, count in workloads:
            for create_fn, body in (
                (resource.create_namespaced_resource_claim_template,
                 claim_template(name, device_class, count)),
                (core.create_namespaced_pod, pod(name, name)),
            ):  # fmt: skip
                try:
                    create_fn(namespace, body)
                except ApiException as err:
                    if err.status != 409:
                        raise
            _claimed(core, namespace, name)  # in this order: the last one is refused
    finally:
        api.close()


def _claimed(core, namespace: str, name: str, timeout: float = 15.0) -> None:
    """Wait until the resourceclaim controller made the pod's claim (or gave up on it)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = core.read_namespaced_pod(name, namespace).status
        if status.resource_claim_statuses:
            return
        events = core.list_namespaced_event(
            namespace,
            field_selector=f"involvedObject.name={name},reason=FailedResourceClaimCreation",
        )
        if events.items:
            return
        time.sleep(0.2)
