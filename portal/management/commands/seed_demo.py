"""Create the demo accounts and the demo cluster record. Safe to run again."""

from __future__ import annotations

import os

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from inventory.models import Cluster

DEMO_ADMIN = ("admin", "admin-demo-pass")


class Command(BaseCommand):
    help = "Create demo accounts and the simulated cluster's Cluster row (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--kubeconfig", default=settings.SIM_KUBECONFIG)

    def handle(self, *args, **opts):
        kubeconfig = os.path.abspath(opts["kubeconfig"])
        User = get_user_model()
        username, password = DEMO_ADMIN
        admin, created = User.objects.get_or_create(
            username=username,
            defaults={"is_staff": True, "is_superuser": True, "email": "admin@example.com"},
        )
        if created:
            admin.set_password(password)
            admin.save()
        cluster, _ = Cluster.objects.update_or_create(
            slug="demo",
            defaults={
                "name": "Demo cluster (simulated)",
                "description": "The simulated GPU cluster started by `make demo`.",
                "auth_method": Cluster.AuthMethod.KUBECONFIG,
                "kubeconfig_path": kubeconfig,
                "kubeconfig_context": "",
            },
        )
        self.stdout.write("Demo accounts:")
        self.stdout.write(f"  admin      {username} / {password}   (portal admin)")
        self.stdout.write(f"Demo cluster: {cluster.slug} -> kubeconfig {kubeconfig}")
