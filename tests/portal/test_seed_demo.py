"""seed_demo against the demo fleet: accounts, teams, sample requests; safe to run twice."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from inventory.models import Cluster
from quotas.models import ForeignQuota, Grant, Membership, QuotaRequest, Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_sim(tmp_path):
    from tests import kubesim

    sim = kubesim.start("simcluster/fleets/demo.yaml", tmp_path)
    yield sim.kubeconfig_path
    sim.stop()


def test_seed_demo_is_idempotent_and_makes_the_roles_visible(demo_sim, capsys, settings, tmp_path):
    import json

    from telemetry.models import NodeToken
    from telemetry.tokens import TokenError, authenticate_node

    settings.DATA_DIR = tmp_path
    call_command("seed_demo", kubeconfig=str(demo_sim))
    fleet = json.loads((tmp_path / "agent-tokens.json").read_text())
    assert "a100-02" in fleet and "cpu-00" not in fleet  # GPU nodes only
    assert fleet["a100-02"]["mig"] == {"config": "all-1g.10gb"}
    assert authenticate_node(fleet["h100-00"]["token"]).node_name == "h100-00"
    first_tokens = {n: v["token"] for n, v in fleet.items()}
    out = capsys.readouterr().out
    assert "alice / alice-demo-pass" in out and "admin / admin-demo-pass" in out
    # Decided requests waited hours for a reviewer, so a pending one's estimate is a real
    # time (quotas/request_wait.py), not "any time now" after a median of one second.
    from quotas.decision_time import quota_decisions

    assert quota_decisions().median >= timedelta(hours=2)
    assert set(Team.objects.values_list("slug", flat=True)) == {
        "vision", "nlp", "genomics", "robotics",
    }  # fmt: skip
    assert Membership.objects.get(user__username="bob").role == "manager"
    statuses = sorted(QuotaRequest.objects.values_list("status", flat=True))
    assert statuses == ["approved", "pending", "pending", "rejected"]
    # Day one as an admin would do it: vision's and nlp's own quotas adopted as baselines,
    # nlp's PriorityClass-scoped one kept outside, genomics undecided (its default baseline).
    grants = Grant.objects.filter(kind="baseline").select_related("namespace")
    baselines = {(g.namespace.name, g.resource, g.amount) for g in grants}
    assert baselines == {
        ("ml-vision", "nvidia.com/gpu", 16), ("ml-vision", "nvidia.com/mig-1g.10gb", 14),
        ("nlp-research", "nvidia.com/gpu", 32), ("genomics", "nvidia.com/gpu", 2),
    }  # fmt: skip
    decisions = dict(ForeignQuota.objects.values_list("namespace__name", "decision")
                     .filter(name="gpu-quota"))  # fmt: skip
    assert decisions == {"ml-vision": "adopted", "nlp-research": "adopted",
                         "genomics": "undecided"}  # fmt: skip
    assert Cluster.objects.get(slug="demo").preflight_status == "warning"  # genomics undecided
    # The fake load follows the pods placed (issue #12): a100-00 runs resnet (4) and detr
    # (2) of its 8 GPUs, v100-01 only robotics' idle sim-rl-1, a100-01 nothing running.
    assert fleet["a100-00"]["patterns"] == ["busy"] * 6 + ["free"] * 2
    assert fleet["v100-01"]["patterns"][:1] == ["idle"]
    assert set(fleet["v100-01"]["patterns"][1:]) == {"free"}
    assert set(fleet["a100-01"]["patterns"]) == {"free"}
    assert "patterns" not in fleet["a100-02"]  # MIG: its slices' own load
    # Permanent grants have been held for the week the telemetry backfill draws.
    week_ago = timezone.now() - timedelta(days=7)
    permanent = Grant.objects.filter(ends_at__isnull=True)
    assert permanent.exists()
    assert all(abs((g.starts_at - week_ago).total_seconds()) < 120 for g in permanent)
    # Vision's two-week grant began with the history too: the demo's idle grant under the
    # demo cluster's reclaim policy (issue #25 section 2), which the seed turns on.
    timed = Grant.objects.filter(ends_at__isnull=False).get()
    assert abs((timed.starts_at - week_ago).total_seconds()) < 120
    from quotas.models import ReclaimPolicy

    assert ReclaimPolicy.objects.get(cluster__slug="demo").snapshot() == {
        "enabled": True, "idle_hours": 24, "grace_hours": 48, "hold_hours": 168
    }  # fmt: skip
    # And the week of ended GPU pods the sync would have recorded: 8 per whole-GPU class,
    # in the cluster's team namespaces, inside the week.
    from inventory.models import GpuClass, PodRun

    demo = Cluster.objects.get(slug="demo")
    assert abs((demo.pods_recorded_since - week_ago).total_seconds()) < 120
    gpu_classes = GpuClass.objects.filter(cluster=demo, node_count__gt=0,
                                          resources__contains=["nvidia.com/gpu"])  # fmt: skip
    runs = PodRun.objects.filter(cluster=demo)
    assert runs.count() == 8 * gpu_classes.count() > 0
    team_namespaces = set(demo.team_namespaces.values_list("name", flat=True))
    assert set(runs.values_list("namespace", flat=True)) <= team_namespaces
    assert all(r.started_at >= demo.pods_recorded_since and r.ended_at <= timezone.now()
               for r in runs)  # fmt: skip
    call_command("seed_demo", kubeconfig=str(demo_sim))
    assert QuotaRequest.objects.count() == 4 and Team.objects.count() == 4
    assert PodRun.objects.filter(cluster=demo).count() == runs.count()  # seeded once
    # A second run replaces the demo fleet's tokens: the old ones stop working.
    assert NodeToken.objects.active().count() == len(first_tokens)
    with pytest.raises(TokenError):
        authenticate_node(first_tokens["h100-00"])


def test_seed_demo_second_cluster_runs_kueue_with_admitted_borrowing_and_queued_work(
    tmp_path, settings
):
    from kubernetes import client, config

    from devstack.kubeapi import wait_for
    from quotas.models import TeamQueue
    from tests import kubesim

    settings.DATA_DIR = tmp_path
    (tmp_path / "k").mkdir()
    sim = kubesim.start("simcluster/fleets/demo-kueue.yaml", tmp_path / "k")
    # Its assertions rest on kube-scheduler's arithmetic right after the reset, which can
    # keep the previous test's pods in its cache (devstack/controlplane.py restart_scheduler).
    sim.plane.restart_scheduler()
    # One control plane serves the session: the first cluster is left unreachable on purpose
    # (its token refused), as seed_demo allows (it skips that cluster's sample requests).
    demo = sim.write_kubeconfig(tmp_path / "demo.kubeconfig", token="refused", user="nobody")
    try:
        for _ in range(2):  # idempotent
            call_command("seed_demo", kubeconfig=str(demo),
                         kueue_kubeconfig=str(sim.kubeconfig_path),
                         kueue_admin_kubeconfig=str(sim.admin_kubeconfig_path))  # fmt: skip
        research = Cluster.objects.get(slug="research")
        assert research.enforcement == "kueue" and Cluster.objects.get(slug="demo").enforcement \
            == "resourcequota"  # fmt: skip
        assert not Grant.objects.filter(namespace__cluster=research, gpu_class=None).exists()
        assert Grant.objects.filter(namespace__cluster=research).count() == 4
        vision = TeamQueue.objects.get(team__slug="vision", cluster=research)
        assert vision.cohort == "research"
        h100 = vision.status["usage"]["gpu-portal-nvidia-h100-80gb-hbm3/nvidia.com/gpu"]
        assert h100 == {"total": 12, "borrowed": 4}  # 8 own + 4 of nlp's idle H100s
        assert (vision.status["admitted"], vision.status["pending"]) == (3, 1)
        nlp = TeamQueue.objects.get(team__slug="nlp", cluster=research)
        (job,) = nlp.workloads["nlp-research"]["pending_jobs"]
        assert job["gpus"] == {"nvidia.com/gpu": 8}
        assert job["selector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        api = config.new_client_from_config(config_file=str(sim.admin_kubeconfig_path))

        seen = {}

        def bound():  # Kueue admitted it; kube-scheduler binds it a moment later
            pods = client.CoreV1Api(api).list_namespaced_pod("ml-vision").items
            seen.update({p.metadata.name: p for p in pods})
            nodes = {p.metadata.name: p.spec.node_name for p in pods}
            return pods if (nodes["detr-train-2"] or "").startswith("h100-") else None

        try:
            pods = wait_for(bound, what="detr-train-2 bound to an H100 node")
        except TimeoutError as exc:
            pod = seen.get("detr-train-2")
            state = pod and (pod.spec.scheduling_gates, pod.spec.node_selector,
                             [(c.type, c.status, c.reason, c.message)
                              for c in pod.status.conditions or []])  # fmt: skip
            every = client.CoreV1Api(api).list_pod_for_all_namespaces().items
            others = {f"{p.metadata.namespace}/{p.metadata.name}": (p.spec.node_name,
                      p.status.phase) for p in every}  # fmt: skip
            raise AssertionError(
                f"{exc}; detr-train-2: {state}; pods: {others}; scheduler: {_scheduler_cache(sim)}"
            ) from exc
        api.close()
        nodes = {p.metadata.name: p.spec.node_name for p in pods}
        assert nodes["sam-finetune"] is None  # queued by Kueue: gated, never bound
        # The flavor's toleration let them onto the tainted H100 nodes.
        tolerations = {t.key for p in pods for t in p.spec.tolerations or []}
        assert "nvidia.com/gpu" in tolerations
    finally:
        sim.stop()


def _scheduler_cache(sim) -> str:
    """kube-scheduler's own view of the H100 nodes: SIGUSR2 makes it log its cache
    (pkg/scheduler/backend/cache/debugger); for a failure message only."""
    import os
    import signal

    from devstack.kubeapi import wait_for

    sched = next(c for c in sim.plane.components if c.name == "kube-scheduler")
    before = sched.log.stat().st_size
    os.kill(sched.proc.pid, signal.SIGUSR2)
    try:
        wait_for(lambda: sched.log.stat().st_size > before, timeout=5)
    except TimeoutError:
        return "no dump"
    with open(sched.log, "rb") as f:
        f.seek(before)
        text = f.read().decode(errors="replace")
    return " | ".join(line[:400] for line in text.splitlines() if "h100" in line)[:4000]
