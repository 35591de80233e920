"""Create the demo accounts, teams and cluster record, and a few requests. Idempotent."""

from __future__ import annotations

import os
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.test.utils import override_settings
from django.utils import timezone

from gpuagent.fleet import placement_patterns
from inventory.models import Cluster
from inventory.sync import sync_cluster

DEMO_ADMIN = ("admin", "admin-demo-pass")
# username, password, team slug, role
RESEARCHERS = [
    ("alice", "alice-demo-pass", "vision", "member"),
    ("bob", "bob-demo-pass", "vision", "manager"),
    ("carol", "carol-demo-pass", "nlp", "member"),
    ("dave", "dave-demo-pass", "genomics", "manager"),
]
# team slug, name, namespace in the demo fleet, baseline GPUs
TEAMS = [
    ("vision", "Computer Vision", "ml-vision", 4),
    ("nlp", "NLP Research", "nlp-research", 4),
    ("genomics", "Genomics", "genomics", 2),
    ("robotics", "Robotics", "robotics", 0),
]


# Weight (a price per GPU-hour, in the demo's currency) of each product's class, shown
# weighted in showback and the idle insight. Only set where an admin has not set one.
WEIGHTS = {
    "NVIDIA-H200": "5.0", "NVIDIA-H100-80GB-HBM3": "4.0", "NVIDIA-A100-SXM4-80GB": "2.5",
    "NVIDIA-L40S": "1.2", "NVIDIA-L40S-SHARED": "0.3", "Tesla-V100-SXM2-16GB": "0.6",
}  # fmt: skip


# Pods whose GPUs sit idle in the demo (the idle insight's example: robotics' RL run).
IDLE_PODS = {"sim-rl-1"}


def gpus_held_by_pods(cluster: Cluster) -> dict:
    """{node id: (whole GPUs requested by its running pods, their names)}, as synced."""
    from inventory.models import GPU_RESOURCE, GpuPod

    out: dict = {}
    for pod in GpuPod.objects.filter(cluster=cluster, phase="Running", node__isnull=False):
        gpus = int(pod.requests.get(GPU_RESOURCE) or 0)
        if gpus:
            count, names = out.get(pod.node_id, (0, set()))
            out[pod.node_id] = (count + gpus, names | {pod.name})
    return out


# How long the seeded requests waited for their decision, in hours (a median of 4.5): the
# seed decides them as it files them, which would make the typical time to a decision (and
# a pending request's estimated decision, quotas/request_wait.py) one second.
REVIEW_HOURS = (3, 5, 2, 26, 4, 7, 1.5, 9)


def review_times() -> int:
    """Date the decided demo requests' filing back by a reviewer's time; returns how many."""
    from quotas.models import AuditEvent, QuotaRequest, RequestEvent

    decided = QuotaRequest.objects.filter(decided_at__isnull=False).order_by("decided_at", "pk")
    for n, req in enumerate(decided):
        filed = req.decided_at - timedelta(hours=REVIEW_HOURS[n % len(REVIEW_HOURS)])
        QuotaRequest.objects.filter(pk=req.pk).update(created_at=filed)
        RequestEvent.objects.filter(request=req, from_status="").update(at=filed)
        AuditEvent.objects.filter(action="request.submitted", object_id=str(req.pk)).update(
            at=filed
        )
    return len(decided)


def reclaim_policy(cluster: Cluster, admin, start) -> None:
    """The demo cluster reclaims grants idle for a day, after two days' grace (#25); vision's
    two-week grant was approved at ``start`` (the history's first day) and its pods never
    needed it beyond the baselines, so the first pass warns them (in a minute: the demo's
    RECLAIM_INTERVAL_SECONDS)."""
    from quotas.models import Grant
    from quotas.reclaim import set_policy

    set_policy(cluster, None, admin, enabled=True, idle_hours=24, grace_hours=48, hold_hours=168)
    Grant.objects.filter(namespace__cluster=cluster, kind=Grant.Kind.REQUEST,
                         ends_at__isnull=False).update(starts_at=start)  # fmt: skip


def held_since(start) -> int:
    """The seeded permanent grants (baselines, adopted quotas, approved permanent requests)
    have been held since ``start``: the telemetry backfill's first day, so a fresh demo's
    showback compares a week of use with a week of grants (issue #12), not with minutes."""
    from quotas.models import Grant

    return Grant.objects.filter(ends_at__isnull=True, starts_at__gt=start).update(starts_at=start)


def pod_history(clusters, start, now) -> int:
    """A week of ended GPU pods per GPU class, as the sync would have recorded them
    (inventory/podruns.py), to go with the telemetry backfill: showback on the Kueue
    cluster and the waiting page's estimates stand on them. Returns the runs written."""
    from inventory.models import GPU_RESOURCE, GpuClass, PodRun
    from quotas.models import TeamNamespace

    hours = (2, 3, 5, 8, 12, 4)  # how long each ran, in turn
    runs = []
    for cluster in clusters:
        namespaces = list(
            TeamNamespace.objects.filter(cluster=cluster).values_list("name", flat=True)
        )
        if not namespaces:
            continue
        classes = [
            c for c in GpuClass.objects.filter(cluster=cluster, node_count__gt=0)
            if GPU_RESOURCE in (c.resources or [])
        ]  # fmt: skip
        for c_index, cls in enumerate(classes):
            for i in range(8):
                end = now - (now - start) * (i + 0.5) / 8
                ran = timedelta(hours=hours[(i + c_index) % len(hours)])
                runs.append(
                    PodRun(
                        cluster=cluster,
                        namespace=namespaces[i % len(namespaces)],
                        name=f"history-{cls.slug[:40]}-{i}",
                        node_name="",
                        gpu_class=cls,
                        gpus=float(2 ** (i % 3)) / cls.replicas,
                        started_at=max(start, end - ran),
                        ended_at=end,
                    )
                )
        Cluster.objects.filter(pk=cluster.pk).update(pods_recorded_since=start)
    PodRun.objects.bulk_create(runs)
    return len(runs)


def unhealthy(node) -> int:
    """Whole GPUs the device plugin does not offer (allocatable < capacity)."""
    r = next((r for r in node.resources.all() if r.resource == "nvidia.com/gpu"), None)
    return max(0, r.capacity - r.allocatable) if r is not None else 0


def weights(cluster: Cluster) -> None:
    from inventory.models import PRODUCT_LABEL, GpuClass

    for product, weight in WEIGHTS.items():
        GpuClass.objects.filter(
            cluster=cluster, weight=None, selector={PRODUCT_LABEL: product}
        ).update(weight=weight)


class Command(BaseCommand):
    help = "Create demo accounts, teams, the simulated cluster's row and sample requests."

    def add_arguments(self, parser):
        parser.add_argument("--kubeconfig", default=settings.SIM_KUBECONFIG)
        parser.add_argument(
            "--kueue-kubeconfig",
            default="",
            help="the portal's kubeconfig of the second (Kueue) cluster",
        )
        parser.add_argument("--kueue-admin-kubeconfig", default="",
                            help="its admin's kubeconfig (creates the demo workloads)")  # fmt: skip
        parser.add_argument("--dra-kubeconfig", default="",
                            help="the portal's kubeconfig of the third (DRA) cluster")  # fmt: skip
        parser.add_argument("--dra-admin-kubeconfig", default="",
                            help="its admin's kubeconfig (creates the demo's claims)")  # fmt: skip
        parser.add_argument(
            "--history-days", type=float, default=7,
            help="permanent grants start this long ago, with the telemetry backfill's week",
        )  # fmt: skip

    def handle(self, *args, **opts):
        kubeconfig = os.path.abspath(opts["kubeconfig"])
        admin = self._user(*DEMO_ADMIN, staff=True)
        cluster, _ = Cluster.objects.update_or_create(
            slug="demo",
            defaults={
                "name": "Demo cluster (emulated GPUs)",
                "description": (
                    "The demo cluster started by `make demo`: a real control plane, or the "
                    "simulator without Go; its GPUs are emulated."
                ),
                "auth_method": Cluster.AuthMethod.KUBECONFIG,
                "kubeconfig_path": kubeconfig,
                "kubeconfig_context": "",
            },
        )
        from quotas.models import Team

        fresh = not Team.objects.exists()
        run = sync_cluster(cluster, trigger="seed")  # capacity is needed to approve
        if run.error:
            self.stderr.write(f"first sync failed ({run.error}); sample requests skipped")
        self._agent_tokens(cluster, admin)
        # The sample requests' notification e-mails would bury the demo's banner.
        with override_settings(EMAIL_BACKEND="django.core.mail.backends.dummy.EmailBackend"):
            self._teams(cluster, admin, with_requests=not run.error)
        clusters = [cluster] if not run.error else []
        weights(cluster)
        from . import _seed_dra, _seed_kueue

        for option, module in (("kueue", _seed_kueue), ("dra", _seed_dra)):
            portal_kc, admin_kc = opts[f"{option}_kubeconfig"], opts[f"{option}_admin_kubeconfig"]
            if not (portal_kc and admin_kc):
                continue
            with override_settings(EMAIL_BACKEND="django.core.mail.backends.dummy.EmailBackend"):
                other = module.seed(self.stdout, os.path.abspath(portal_kc),
                                    os.path.abspath(admin_kc), admin)  # fmt: skip
            clusters.append(other)
            weights(other)
        if fresh:
            review_times()
        if fresh and opts["history_days"] > 0:
            start = timezone.now() - timedelta(days=opts["history_days"])
            held_since(start)
            reclaim_policy(cluster, admin, start)
            pod_history(clusters, start, timezone.now())
        from inventory.connect import rerun

        for c in clusters:  # what the cluster page shows under "Last preflight"
            self.stdout.write(f"Preflight of {c.slug}: {rerun(c, actor=None).status}")
        self.stdout.write("Demo accounts:")
        self.stdout.write(f"  admin      {DEMO_ADMIN[0]} / {DEMO_ADMIN[1]}   (portal admin)")
        for username, password, team, role in RESEARCHERS:
            self.stdout.write(f"  {username:<10} {username} / {password}   ({role} of {team})")
        self.stdout.write(f"Demo cluster: {cluster.slug} -> kubeconfig {kubeconfig}")
        self.stdout.write(f"Portal identity on the cluster: {self._identity(cluster)}")

    def _identity(self, cluster: Cluster) -> str:
        """Who the cluster says the portal is (SelfSubjectReview), or why it cannot tell."""
        from inventory.kube import KubeError, KubeGateway

        try:
            with KubeGateway(cluster) as gw:
                info = gw.whoami()
        except KubeError as err:
            return f"unknown ({err})"
        return info.get("username") or "unknown (the cluster named no user)"

    def _foreign_quotas(self, namespaces) -> None:
        """Record the quotas the portal does not own (docs/quotas.md, adoption)."""
        from inventory.kube import KubeError
        from quotas import adoption

        for ns in namespaces:
            try:
                adoption.read_namespace(ns)
            except KubeError as err:
                self.stderr.write(f"Could not read the quotas of {ns}: {err}")

    def _adopt_foreign(self, namespaces, admin) -> set[str]:
        """What an admin would do on day one: adopt the unscoped quotas vision and nlp
        already had (their limits become baselines; the quotas keep binding until removed)
        and keep nlp's PriorityClass-scoped one as an outside limit. Genomics stays
        undecided, so the demo shows that state and an apply held for confirmation."""
        from quotas import adoption
        from quotas.models import ForeignQuota

        adopted = set()
        for slug in ("vision", "nlp"):
            for fq in ForeignQuota.objects.filter(namespace=namespaces[slug], gone_at__isnull=True):
                if fq.scoped:
                    adoption.keep(fq, admin, note="demo: kept as an outside limit")
                else:
                    adoption.adopt(fq, admin, note="demo: adopted at onboarding")
                    adopted.add(slug)
        return adopted

    def _agent_tokens(self, cluster: Cluster, admin) -> None:
        """Issue a node token per GPU node and write them for the demo's fake agent fleet.

        Raw tokens exist only at issue time, so every run replaces the previous demo
        tokens; the file lives in the git-ignored data folder.
        """
        import json

        from inventory.models import Node
        from telemetry import tokens
        from telemetry.models import NodeToken

        NodeToken.objects.filter(node__cluster=cluster, name="demo-fleet").active().update(
            revoked_at=timezone.now()
        )
        fleet = {}
        held = gpus_held_by_pods(cluster)
        for node in Node.objects.filter(cluster=cluster).present().gpu():
            _, raw = tokens.issue(node, created_by=admin, name="demo-fleet")
            fleet[node.name] = {
                "token": raw,
                "product": node.base_product,  # the physical GPU, without -SHARED
                "gpus": node.gpu_count,
                "driver_version": node.driver_version or "550.107.02",
                "mig": {"config": node.mig_config} if node.mig_config else {},
                # The fake agents report these GPUs lost, so the node page can name the
                # device the device plugin marked unhealthy (issue #12).
                "unhealthy": unhealthy(node),
            }
            if node.mig_config in ("", "all-disabled"):  # load follows the pods placed
                allocated, pods = held.get(node.pk, (0, set()))
                fleet[node.name]["patterns"] = placement_patterns(
                    node.gpu_count, allocated, idle=bool(pods) and pods <= IDLE_PODS
                )
                fleet[node.name]["placed"] = True
        path = settings.DATA_DIR / "agent-tokens.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(fleet, indent=1))
        path.chmod(0o600)

    def _user(self, username: str, password: str, *, staff: bool = False):
        user, created = get_user_model().objects.get_or_create(
            username=username,
            defaults={
                "is_staff": staff,
                "is_superuser": staff,
                "email": f"{username}@example.com",
            },
        )
        if created:
            user.set_password(password)
            user.save()
        return user

    @transaction.atomic
    def _teams(self, cluster: Cluster, admin, *, with_requests: bool) -> None:
        from quotas import services
        from quotas.models import Membership, QuotaRequest, Team, TeamNamespace

        fresh = not Team.objects.exists()
        namespaces = {}
        for slug, name, namespace, _ in TEAMS:
            team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": name})
            namespaces[slug], _ = TeamNamespace.objects.get_or_create(
                cluster=cluster, name=namespace, defaults={"team": team}
            )
        if with_requests:  # the cluster answered: show its own quotas (gpu-quota) at once
            self._foreign_quotas(namespaces.values())
        for username, password, slug, role in RESEARCHERS:
            user = self._user(username, password)
            Membership.objects.get_or_create(
                team=Team.objects.get(slug=slug), user=user, defaults={"role": role}
            )
        if not (fresh and with_requests):
            return
        adopted = self._adopt_foreign(namespaces, admin)
        for slug, _, _, baseline in TEAMS:
            if baseline and slug not in adopted:
                services.set_baseline(namespaces[slug], "nvidia.com/gpu", baseline, admin)
        users = {u.username: u for u in get_user_model().objects.all()}
        now = timezone.now()

        def ask(user, slug, amount, days, why, resource="nvidia.com/gpu") -> QuotaRequest:
            data = services.RequestData(
                team=namespaces[slug].team, namespace=namespaces[slug], resource=resource,
                amount=amount, justification=why,
                ends_at=now + timedelta(days=days) if days else None,
            )  # fmt: skip
            return services.submit(user, data)

        services.approve(
            ask(users["alice"], "vision", 8, 14, "ResNet ablations for the CVPR rebuttal"),
            admin, note="granted for two weeks",
        )  # fmt: skip
        ask(users["carol"], "nlp", 16, 30, "Pre-training a 7B model on the new corpus")
        ask(users["dave"], "genomics", 7, 7, "AlphaFold batch for the protein screen",
            resource="nvidia.com/mig-1g.10gb")  # fmt: skip
        rejected = ask(users["bob"], "vision", 24, 60, "Exploratory video diffusion runs")
        services.reject(rejected, admin, "More than the cluster has; ask for 8 for two weeks.")
