"""The DaemonSet manifest keeps the properties docs/agent.md promises."""

from __future__ import annotations

from pathlib import Path

import yaml

MANIFEST = Path(__file__).resolve().parents[2] / "deploy/kubernetes/agent-daemonset.yaml"


def test_daemonset_runs_on_gpu_nodes_unprivileged_with_node_identity():
    docs = {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    # gpu.deploy.client: the GPU Operator's pause protocol (docs/install.md, tests/deploy/).
    assert pod["nodeSelector"] == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.deploy.client": "true",
    }
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "gpuagent", "run"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["GPU_AGENT_TOKEN_FILE"]["value"].endswith("/$(NODE_NAME)")
    names = list(env)
    assert names.index("NODE_NAME") < names.index("GPU_AGENT_TOKEN_FILE")  # expansion order
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert not sc.get("privileged") and pod["securityContext"]["runAsNonRoot"] is True
    assert "hostPID" not in pod and "hostNetwork" not in pod
    assert container["resources"]["requests"] == {"cpu": "10m", "memory": "48Mi"}
    assert all(m.get("readOnly") for m in container["volumeMounts"])
