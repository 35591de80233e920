"""Group rules, the accounts single sign-on created or linked, and what it manages.

``GroupRule``: an IdP group (exact name or glob) gives a team membership with a role, or
portal admin rights (``is_staff``); admins edit them in the Django admin.
``SsoIdentity``: which provider subject an account belongs to (matched at every sign-in
by issuer + ``sub``, never by e-mail) and whether single sign-on granted its ``is_staff``.
``ManagedMembership``: the team memberships the rules granted, so they can be changed or
removed when the groups change; memberships without one were added by hand and are left
alone. Deleting a membership by hand deletes its row too (the next sign-in grants it
again if a rule still does).
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from quotas.models import Membership, Team


class GroupRule(models.Model):
    class Grants(models.TextChoices):
        TEAM = "team", "team membership"
        STAFF = "staff", "portal admin (is_staff)"

    group = models.CharField(
        max_length=255,
        help_text="The IdP group, exactly (gpu-vision) or as a glob (vision-*, /org/*/gpu). "
        "Case-sensitive; * ? and [...] are the glob characters.",
    )
    grants = models.CharField(max_length=10, choices=Grants.choices, default=Grants.TEAM)
    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, null=True, blank=True, related_name="sso_rules"
    )
    role = models.CharField(
        max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER,
        help_text="For team rules: the role in the team. Manager wins over member.",
    )  # fmt: skip
    enabled = models.BooleanField(default=True)
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["group", "grants"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(grants="team") & Q(team__isnull=False))
                | (Q(grants="staff") & Q(team__isnull=True)),
                name="sso_rule_team_iff_team_rule",
                violation_error_message="A team rule names a team; a portal admin rule none.",
            ),
        ]

    def __str__(self) -> str:
        if self.grants == self.Grants.STAFF:
            return f"{self.group} -> portal admin"
        return f"{self.group} -> {self.team} ({self.role})"

    def clean(self) -> None:
        if self.grants == self.Grants.TEAM and self.team_id is None:
            raise ValidationError({"team": "A team rule needs a team."})
        if self.grants == self.Grants.STAFF and self.team_id is not None:
            raise ValidationError({"team": "A portal admin rule names no team."})
        if not self.group.strip():
            raise ValidationError({"group": "Name an IdP group or a glob."})

    def state(self) -> dict:
        return {
            "group": self.group, "grants": self.grants, "enabled": self.enabled,
            "team": self.team.slug if self.team_id else None,
            "role": self.role if self.grants == self.Grants.TEAM else None,
        }  # fmt: skip


class SsoIdentity(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    # The groups of the last sign-in (what the rules were applied to).
    groups = models.JSONField(default=list, blank=True)
    # is_staff was granted by a rule: revoked when no rule grants it any more.
    staff_managed = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_sign_in = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        ordering = ["user__username"]
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} = {self.subject} at {self.issuer}"


class ManagedMembership(models.Model):
    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="sso")
    # The IdP groups whose rules grant it (as of the last sign-in).
    groups = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "membership managed by single sign-on"
        verbose_name_plural = "memberships managed by single sign-on"

    def __str__(self) -> str:
        return f"{self.membership.user} in {self.membership.team} (single sign-on)"
