"""Which pods count as using a node's GPUs before a MIG change: extended-resource requests,
and on a DRA cluster the pods that hold devices through claims."""

from __future__ import annotations

from gpuemu.migmanager import requests_gpus
from mig.steps import _is_gpu_pod


def pod(spec: dict, phase: str = "Running") -> dict:
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def test_gpu_requests_and_dra_claims_both_count():
    plain = pod({"containers": [{"name": "m", "resources": {"limits": {"cpu": "1"}}}]})
    gpu = pod({"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]})
    container = {"name": "m", "resources": {"claims": [{"name": "g"}]}}
    claims = [{"name": "g", "resourceClaimTemplateName": "t"}]
    claimed = pod({"resourceClaims": claims, "containers": [container]})
    done = pod(claimed["spec"], phase="Succeeded")
    assert [_is_gpu_pod(p) for p in (plain, gpu, claimed, done)] == [False, True, True, False]
    assert [requests_gpus(p) for p in (plain, gpu, claimed)] == [False, True, True]
