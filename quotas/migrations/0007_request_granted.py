"""QuotaRequest.granted_amount / granted_ends_at: what an approval gave, kept as decided.

Existing decided requests get it from the audit trail (the grant as created, or the end a
renewal set), else from the grant as it is now (the best left to know).
"""

from django.db import migrations, models
from django.utils.dateparse import parse_datetime

GAVE_NOTHING = ("rejected", "cancelled", "pending")


def backfill(apps, schema_editor):
    QuotaRequest = apps.get_model("quotas", "QuotaRequest")
    AuditEvent = apps.get_model("quotas", "AuditEvent")
    decided = QuotaRequest.objects.exclude(status__in=GAVE_NOTHING).exclude(kind="release")
    for req in decided.select_related("grant", "target_grant").iterator():
        grant = req.grant if req.kind == "new" else req.target_grant
        if grant is None:
            continue
        action = "grant.created" if req.kind == "new" else "grant.renewed"
        event = (
            AuditEvent.objects.filter(action=action, object_id=str(grant.pk),
                                      at__gte=req.decided_at or req.created_at)
            .order_by("at").first()
        )  # fmt: skip
        ends_at = grant.ends_at
        if event is not None and event.after and "ends_at" in event.after:
            raw = event.after["ends_at"]
            ends_at = parse_datetime(raw) if raw else None
        req.granted_amount, req.granted_ends_at = grant.amount, ends_at
        req.save(update_fields=["granted_amount", "granted_ends_at"])


class Migration(migrations.Migration):
    dependencies = [("quotas", "0006_grant_applied_at")]

    operations = [
        migrations.AddField(
            model_name="quotarequest",
            name="granted_amount",
            field=models.PositiveIntegerField(
                blank=True, help_text="empty: nothing granted (yet)", null=True
            ),
        ),
        migrations.AddField(
            model_name="quotarequest",
            name="granted_ends_at",
            field=models.DateTimeField(
                blank=True,
                help_text="the approved end; empty and an amount: permanent",
                null=True,
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
