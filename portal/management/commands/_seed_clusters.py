"""What the demo's second and third clusters share (seed_demo): their row and first sync,
and the per-class grants they start with."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from inventory.models import Cluster, GpuClass

PRODUCT = "nvidia.com/gpu.product"


def connect(stdout, slug: str, name: str, description: str, portal_kubeconfig: str,
            enforcement: str) -> tuple[Cluster, bool]:  # fmt: skip
    """The cluster's row (created or updated) and its first sync; (cluster, whether the
    sync succeeded: granting needs the capacity it reads)."""
    from inventory.sync import sync_cluster

    cluster, _ = Cluster.objects.update_or_create(
        slug=slug,
        defaults={
            "name": name, "description": description, "enforcement": enforcement,
            "auth_method": Cluster.AuthMethod.KUBECONFIG,
            "kubeconfig_path": portal_kubeconfig, "kubeconfig_context": "",
        },
    )  # fmt: skip
    run = sync_cluster(cluster, trigger="seed")
    if run.error:
        stdout.write(f"first sync of {slug} failed ({run.error}); its grants are skipped")
    return cluster, not run.error


def approve_grants(cluster: Cluster, grants: list, admin) -> tuple[dict, bool]:
    """The team namespaces ``grants`` name on ``cluster`` and, while the cluster has no grant
    yet, each grant requested by a member of its team and approved by ``admin``.

    ``grants``: [(team slug, namespace, [(product, resource, amount, days or None, why)])].
    Returns ({team slug: TeamNamespace}, whether the grants were made now)."""
    from quotas import services
    from quotas.models import Grant, Team, TeamNamespace

    namespaces = {}
    for slug, namespace, _ in grants:
        namespaces[slug], _ = TeamNamespace.objects.get_or_create(
            cluster=cluster, name=namespace, defaults={"team": Team.objects.get(slug=slug)}
        )
    if Grant.objects.filter(namespace__cluster=cluster).exists():
        return namespaces, False
    now = timezone.now()
    for slug, _, wanted in grants:
        ns = namespaces[slug]
        member = ns.team.memberships.order_by("role").first().user
        for product, resource, amount, days, why in wanted:
            cls = GpuClass.objects.get(cluster=cluster, selector={PRODUCT: product})
            data = services.RequestData(
                team=ns.team, namespace=ns, resource=resource, amount=amount, gpu_class=cls,
                justification=why, ends_at=now + timedelta(days=days) if days else None,
            )  # fmt: skip
            services.approve(services.submit(member, data), admin)
    return namespaces, True
