"""Grant.applied_at: when an apply that counted the grant first succeeded (issue #11).

Existing grants that a succeeded operation of their namespace could have counted (it
finished after the grant was written and the grant had started) are marked enforced, so
a later failure never withdraws a grant the cluster already holds.
"""

from django.db import migrations, models
from django.db.models import Exists, Min, OuterRef


def mark_enforced(apps, schema_editor):
    Grant = apps.get_model("quotas", "Grant")
    Operation = apps.get_model("quotas", "Operation")
    done = Operation.objects.filter(
        namespace_id=OuterRef("namespace_id"),
        status="succeeded",
        finished_at__gte=OuterRef("created_at"),
    )
    for grant in Grant.objects.filter(start_applied=True).filter(Exists(done)):
        first = (
            Operation.objects.filter(
                namespace_id=grant.namespace_id, status="succeeded",
                finished_at__gte=grant.created_at,
            ).aggregate(at=Min("finished_at"))["at"]
        )  # fmt: skip
        grant.applied_at = first
        grant.save(update_fields=["applied_at"])


class Migration(migrations.Migration):
    dependencies = [
        ("quotas", "0005_team_queue"),
    ]

    operations = [
        migrations.AddField(
            model_name="grant",
            name="applied_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(mark_enforced, migrations.RunPython.noop),
    ]
