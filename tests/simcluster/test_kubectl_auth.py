"""kubectl against the simulator: tokens, ``auth can-i``/``whoami`` and the protobuf creates.

kubectl 1.32 POSTs ``application/vnd.kubernetes.protobuf`` for ``create token``, ``auth
can-i``, ``auth whoami`` and ``create namespace|configmap|quota|secret|serviceaccount|role|
rolebinding|clusterrole|clusterrolebinding``, and sends a kubeconfig's token only over TLS.
Real sources followed (kubernetes/kubernetes): ``staging/src/k8s.io/kubectl/pkg/cmd/auth/
cani.go`` and ``whoami.go``, ``staging/src/k8s.io/kubectl/pkg/cmd/create/create_token.go``,
``pkg/registry/core/serviceaccount/storage/token.go``,
``staging/src/k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go`` and the
``generated.proto`` files of ``k8s.io/api`` (core, rbac, authentication, authorization v1)
and ``apimachinery/pkg/apis/meta/v1``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from simcluster import SimCluster
from simcluster.context import User
from simcluster.requestinfo import non_resource_attributes
from tests.prereqs import need_kubectl

from .helpers import Kubectl, jwt_claims


def _bot(sim: SimCluster, kubectl: Kubectl, tmp_path: Path) -> Path:
    """ServiceAccount ml-vision/bot, its token from ``kubectl create token``, a kubeconfig."""
    kubectl("create", "serviceaccount", "bot", "-n", "ml-vision")
    token = kubectl("create", "token", "bot", "-n", "ml-vision").stdout.strip()
    return sim.write_kubeconfig(tmp_path / "bot", token=token, user="bot")


def test_whoami_admin_and_serviceaccount(sim: SimCluster, kubectl: Kubectl, tmp_path) -> None:
    out = kubectl("auth", "whoami").stdout
    assert "kubernetes-admin" in out and "[system:masters system:authenticated]" in out
    bot = _bot(sim, kubectl, tmp_path)
    me = json.loads(kubectl("auth", "whoami", "-o", "json", kubeconfig=bot).stdout)
    info = me["status"]["userInfo"]
    assert me["kind"] == "SelfSubjectReview"
    assert info["username"] == "system:serviceaccount:ml-vision:bot"
    assert info["uid"] == sim.get("serviceaccounts", "bot", "ml-vision")["metadata"]["uid"]
    assert info["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:ml-vision",
        "system:authenticated",
    ]
    assert info["extra"]["authentication.kubernetes.io/credential-id"][0].startswith("JTI=")


def test_create_token_flags_and_errors(sim: SimCluster, kubectl: Kubectl) -> None:
    kubectl("create", "serviceaccount", "bot", "-n", "ml-vision")
    token = kubectl("create", "token", "bot", "-n", "ml-vision", "--duration=2h").stdout.strip()
    claims = jwt_claims(token)
    assert claims["exp"] - claims["iat"] == 7200
    aud = kubectl("create", "token", "bot", "-n", "ml-vision", "--audience=vault").stdout
    assert sim.authn.authenticate("Bearer " + aud.strip()) is None  # not for the API server
    short = kubectl("create", "token", "bot", "-n", "ml-vision", "--duration=5m", ok=False)
    assert short.returncode == 1
    assert short.stderr.strip() == (
        'error: failed to create token: TokenRequest.authentication.k8s.io "" is invalid: '
        "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 "
        "minutes"
    )
    missing = kubectl("create", "token", "nope", "-n", "ml-vision", ok=False)
    assert 'serviceaccounts "nope" not found' in missing.stderr


def test_can_i_follows_rbac(sim: SimCluster, kubectl: Kubectl, tmp_path) -> None:
    bot = _bot(sim, kubectl, tmp_path)
    no = kubectl("auth", "can-i", "list", "pods", "-n", "ml-vision", kubeconfig=bot, ok=False)
    assert (no.returncode, no.stdout.strip()) == (1, "no")
    denied = kubectl("get", "pods", "-n", "ml-vision", kubeconfig=bot, ok=False)
    assert denied.stderr.strip() == (
        'Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:'
        'ml-vision:bot" cannot list resource "pods" in API group "" in the namespace "ml-vision"'
    )
    kubectl("create", "role", "pods", "--verb=get,list", "--resource=pods", "-n", "ml-vision")
    kubectl(
        "create", "rolebinding", "bot-pods", "--role=pods",
        "--serviceaccount=ml-vision:bot", "-n", "ml-vision",
    )  # fmt: skip
    yes = kubectl("auth", "can-i", "list", "pods", "-n", "ml-vision", kubeconfig=bot)
    assert yes.stdout.strip() == "yes"
    assert "resnet-train-0" in kubectl("get", "pods", "-n", "ml-vision", kubeconfig=bot).stdout
    other = kubectl("auth", "can-i", "list", "pods", "-n", "genomics", kubeconfig=bot, ok=False)
    assert other.stdout.strip() == "no"
    assert kubectl("auth", "can-i", "get", "/healthz", kubeconfig=bot).stdout.strip() == "yes"
    rules = kubectl("auth", "can-i", "--list", "-n", "ml-vision", kubeconfig=bot).stdout
    lines = [line.split() for line in rules.splitlines()]
    assert ["pods", "[]", "[]", "[get", "list]"] in lines
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in lines
    everything = kubectl("auth", "can-i", "--list").stdout.splitlines()
    assert everything[1].split() == ["*.*", "[]", "[]", "[*]"]
    assert kubectl("auth", "can-i", "delete", "nodes").stdout.strip() == "yes"


def test_imperative_creates_send_protobuf(sim: SimCluster, kubectl: Kubectl) -> None:
    kubectl("create", "namespace", "team-a")
    ns = sim.get("namespaces", "team-a")
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-a"}
    kubectl(
        "create", "configmap", "cfg", "--from-literal=a=1", "--from-literal=b=2", "-n", "team-a"
    )
    assert sim.get("configmaps", "cfg", "team-a")["data"] == {"a": "1", "b": "2"}
    kubectl(
        "create", "quota", "gpu", "--hard=requests.nvidia.com/gpu=4,pods=10",
        "--scopes=NotBestEffort", "-n", "team-a",
    )  # fmt: skip
    quota = sim.get("resourcequotas", "gpu", "team-a")
    assert quota["spec"] == {
        "hard": {"pods": "10", "requests.nvidia.com/gpu": "4"},
        "scopes": ["NotBestEffort"],
    }
    kubectl("create", "serviceaccount", "robot", "-n", "team-a")
    assert sim.get("serviceaccounts", "robot", "team-a")["metadata"]["uid"]
    kubectl("create", "secret", "generic", "s", "--from-literal=k=v", "-n", "team-a")
    secret = sim.get("secrets", "s", "team-a")
    assert (secret["data"], secret["type"]) == ({"k": base64.b64encode(b"v").decode()}, "Opaque")
    kubectl(
        "create", "role", "r", "--verb=get,update", "--resource=configmaps",
        "--resource-name=cfg", "-n", "team-a",
    )  # fmt: skip
    assert sim.get("roles", "r", "team-a")["rules"] == [
        {"verbs": ["get", "update"], "apiGroups": [""], "resources": ["configmaps"],
         "resourceNames": ["cfg"]}
    ]  # fmt: skip
    kubectl(
        "create", "rolebinding", "rb", "--role=r", "--user=alice", "--group=devs",
        "--serviceaccount=team-a:robot", "-n", "team-a",
    )  # fmt: skip
    rb = sim.get("rolebindings", "rb", "team-a")
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}
    assert [(s["kind"], s["name"], s.get("namespace")) for s in rb["subjects"]] == [
        ("User", "alice", None),
        ("Group", "devs", None),
        ("ServiceAccount", "robot", "team-a"),
    ]
    kubectl("create", "clusterrole", "urls", "--verb=get", "--non-resource-url=/logs/*")
    assert sim.get("clusterroles", "urls")["rules"] == [
        {"verbs": ["get"], "nonResourceURLs": ["/logs/*"]}
    ]
    kubectl("create", "clusterrole", "agg", "--aggregation-rule=team=a")
    agg = sim.get("clusterroles", "agg")
    assert agg["aggregationRule"] == {"clusterRoleSelectors": [{"matchLabels": {"team": "a"}}]}
    kubectl("create", "clusterrolebinding", "crb", "--clusterrole=urls", "--group=devs")
    assert sim.get("clusterrolebindings", "crb")["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"}
    ]
    # the new bindings work at once: the group may now read /logs/...
    bob = User("bob", "", ("devs", "system:authenticated"))
    assert sim.authz.authorize(bob, non_resource_attributes("get", "/logs/x"))[0]
    assert not sim.authz.authorize(bob, non_resource_attributes("get", "/metrics"))[0]


def test_impersonation_needs_the_impersonate_verb(
    sim: SimCluster, kubectl: Kubectl, tmp_path
) -> None:
    """``staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go``."""
    bot = _bot(sim, kubectl, tmp_path)
    as_bot = ["--as=system:serviceaccount:ml-vision:bot"]
    me = json.loads(kubectl("auth", "whoami", "-o", "json", *as_bot).stdout)["status"]
    assert me["userInfo"] == {
        "username": "system:serviceaccount:ml-vision:bot",
        "groups": [
            "system:serviceaccounts",
            "system:serviceaccounts:ml-vision",
            "system:authenticated",
        ],
    }
    denied = kubectl("get", "nodes", *as_bot, ok=False)  # the admin acting as the bot
    assert 'User "system:serviceaccount:ml-vision:bot" cannot list resource "nodes"' in (
        denied.stderr
    )
    group = json.loads(
        kubectl("auth", "whoami", "-o", "json", "--as=alice", "--as-group=devs").stdout
    )
    assert group["status"]["userInfo"] == {
        "username": "alice",
        "groups": ["devs", "system:authenticated"],
    }
    refused = kubectl("get", "pods", "--as=alice", kubeconfig=bot, ok=False)
    assert refused.stderr.strip() == (
        'Error from server (Forbidden): users "alice" is forbidden: User "system:'
        'serviceaccount:ml-vision:bot" cannot impersonate resource "users" in API group "" at '
        "the cluster scope"
    )


def test_cli_applies_manifests_and_writes_serviceaccount_kubeconfigs(tmp_path) -> None:
    """``python -m simcluster --apply ... --serviceaccount-kubeconfig NS/NAME=PATH``."""
    from simcluster.testing import start_subprocess

    binary = need_kubectl()
    manifest = tmp_path / "sa.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: tools}\n---\n"
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: runner, namespace: tools}\n"
    )
    sa_kc = tmp_path / "runner.kubeconfig"
    run = start_subprocess(
        extra_args=[
            "--apply",
            str(manifest),
            "--serviceaccount-kubeconfig",
            f"tools/runner={sa_kc}",
        ]
    )
    try:
        me = Kubectl(binary, run, tmp_path)("auth", "whoami", "-o", "json", kubeconfig=sa_kc)
        assert json.loads(me.stdout)["status"]["userInfo"]["username"] == (
            "system:serviceaccount:tools:runner"
        )
        assert run.token and run.token in Path(run.kubeconfig).read_text()
    finally:
        run.stop()
