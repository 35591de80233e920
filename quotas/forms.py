"""Forms of the quota pages. They only parse input; the rules live in ``quotas.services``,
whose field-level ``ValidationError`` messages the views put back on these forms.

Date-times are entered and shown in UTC (``<input type="datetime-local">`` has no zone).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django import forms
from django.core.exceptions import ValidationError
from django.forms.boundfield import BoundField
from django.utils import timezone

from inventory.models import MIG_RESOURCE_PREFIX, Cluster, GpuClass
from portal.fields import strict_datetime

from . import services
from .capacity import advertised_resources
from .models import DNS_LABEL, AuditEvent, NotificationOptOut, QuotaRequest, Team, TeamNamespace

DATETIME_LOCAL = "%Y-%m-%dT%H:%M"


class DescribedBoundField(BoundField):
    """Points ``aria-describedby`` at the help text and the error message (see _field.html)."""

    def build_widget_attrs(self, attrs, widget=None):
        attrs = super().build_widget_attrs(attrs, widget)
        ids = []
        if self.help_text:
            ids.append(f"{self.auto_id}_helptext")
        if self.errors:
            ids.append(f"{self.auto_id}_error")
        if ids:
            attrs["aria-describedby"] = " ".join(ids)
        return attrs


class PortalForm(forms.Form):
    bound_field_class = DescribedBoundField

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        """Put a ``services`` ValidationError's messages on the matching fields."""
        for name, messages in errors.items():
            field = name if name in self.fields else None
            for message in messages:
                self.add_error(field, message)


class UTCDateTimeField(forms.DateTimeField):
    """A ``datetime-local`` input read and written in UTC, whatever the active zone."""

    widget = forms.DateTimeInput(attrs={"type": "datetime-local"}, format=DATETIME_LOCAL)
    input_formats = [DATETIME_LOCAL, "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]

    def to_python(self, value):
        with timezone.override(UTC):
            return strict_datetime(super().to_python(value))  # offsets PostgreSQL can store

    def prepare_value(self, value):
        if isinstance(value, datetime) and timezone.is_aware(value):
            return value.astimezone(UTC)
        return value


class RequestForm(PortalForm):
    """A new grant: team, namespace, resource, amount, window, justification."""

    PERMANENT, WINDOW = "permanent", "window"
    SLICES_GROUP = "MIG slices that exist now"

    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label="Choose a team")
    namespace = forms.ModelChoiceField(
        queryset=TeamNamespace.objects.none(),
        empty_label="Choose a namespace",
        help_text="Only namespaces of the chosen team.",
    )
    resource = forms.ChoiceField(
        choices=(),
        help_text=(
            "Whole GPUs, or MIG slices the namespace's cluster advertises now. For GPUs "
            "partitioned into a new MIG layout, use the MIG request form."
        ),
    )
    gpu_class = forms.ModelChoiceField(
        queryset=GpuClass.objects.none(),
        required=False,
        empty_label="Any class",
        label="GPU class",
        help_text="A GPU model of the namespace's cluster, or any class.",
    )
    amount = forms.IntegerField(min_value=1, widget=forms.NumberInput(attrs={"min": 1}))
    duration = forms.ChoiceField(
        choices=[(PERMANENT, "Permanent"), (WINDOW, "For a window")],
        widget=forms.RadioSelect,
        initial=PERMANENT,
        label="How long",
    )
    starts_at = UTCDateTimeField(
        required=False, label="Start (UTC)", help_text="Empty: now. Times are UTC."
    )
    ends_at = UTCDateTimeField(
        required=False,
        label="End (UTC)",
        help_text="Required for a window; a permanent grant has none. Times are UTC.",
    )
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        max_length=2000,
        help_text="What the GPUs are for; the admins read this.",
    )

    def __init__(self, *args, teams, member_team_ids: set, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        # With the user, clean() also checks the service's rules, so one round shows
        # every problem (issue #12); without, only the fields' own checks run here.
        self.user = user
        self.fields["team"].queryset = teams
        self.fields["team"].label_from_instance = lambda t: (
            t.name if t.pk in member_team_ids else f"{t.name} (on behalf)"
        )
        namespaces = TeamNamespace.objects.filter(team__in=teams).select_related("cluster", "team")
        self.fields["namespace"].queryset = namespaces
        self.fields["namespace"].label_from_instance = lambda ns: (
            f"{ns.cluster.slug}/{ns.name} ({ns.team.slug})"
        )
        # Most people are in one team with one namespace: nothing to choose then. Before
        # _resource_choices, which reads (and so caches) the namespace's bound field.
        if not self.is_bound:
            only_teams = list(teams[:2])
            if len(only_teams) == 1 and "team" not in self.initial:
                self.initial["team"] = only_teams[0].pk
            only_namespaces = list(namespaces[:2])
            if len(only_namespaces) == 1 and "namespace" not in self.initial:
                self.initial["namespace"] = only_namespaces[0].pk
                self.initial.setdefault("team", only_namespaces[0].team_id)
        self.fields["resource"].choices = self._resource_choices(namespaces)
        # The chosen namespace's cluster's classes only; "any class" only where the
        # backend can enforce it (Kueue quota is per flavor: a class must be named).
        chosen = self._chosen(namespaces)
        classes = GpuClass.objects.filter(
            cluster__in=[chosen.cluster_id] if chosen else namespaces.values("cluster")
        ).select_related("cluster")
        self.fields["gpu_class"].queryset = classes
        if chosen is not None and chosen.cluster.enforces_classes:
            self.fields["gpu_class"].required = True
            self.fields["gpu_class"].empty_label = None
            self.fields["gpu_class"].help_text = (
                f"{chosen.cluster.name} enforces quota per GPU model "
                f"({chosen.cluster.backend_name}): choose one."
            )
        self.fields["gpu_class"].label_from_instance = lambda c: (
            f"{c.cluster.slug}: {c.name} ({c.capacity_text()})"
        )

    def _chosen(self, namespaces):
        """The namespace chosen (or given as initial), or None."""
        chosen = self["namespace"].value()
        try:
            return namespaces.filter(pk=chosen).first() if chosen else None
        except (ValueError, forms.ValidationError):
            return None

    def _resource_choices(self, namespaces) -> list[tuple[str, str]]:
        """The chosen namespace's cluster's resources; before one is chosen, every
        resource of the user's clusters (the service rejects one the cluster lacks)."""
        ns = self._chosen(namespaces)
        clusters = {ns.cluster} if ns else {n.cluster for n in namespaces}
        names = sorted({r for c in clusters for r in advertised_resources(c)})
        # Two kinds of asking (issue #12): whole GPUs, or quota on MIG slices nodes already
        # advertise. A new MIG layout (reconfiguring a GPU) is the MIG request form's job;
        # the page links there.
        whole = [(r, r) for r in names if not r.startswith(MIG_RESOURCE_PREFIX)]
        slices = [(r, r) for r in names if r.startswith(MIG_RESOURCE_PREFIX)]
        if not slices:
            return whole
        return [*whole, (self.SLICES_GROUP, slices)]

    def clean(self):
        data = super().clean()
        if data.get("duration") == self.PERMANENT:
            data["ends_at"] = None
        elif data.get("duration") == self.WINDOW and not data.get("ends_at"):
            self.add_error("ends_at", "Give an end, or choose a permanent grant.")
        if self.user is not None:
            self._check_rules(data)
        return data

    def _check_rules(self, data: dict) -> None:
        """Run ``services.validate`` on what parsed, so the service's messages (past start,
        too many GPUs, a class the cluster lacks, a short justification, ...) come in the
        same round as the fields' own; a field keeps its first error only."""
        team, namespace = data.get("team"), data.get("namespace")
        problems: dict[str, list[str]] = {}
        if team is None or namespace is None:  # no cluster to check against: the text only
            found: dict[str, str] = {}
            services.clean_justification(data.get("justification"), found)
            problems = {k: [v] for k, v in found.items()}
        else:
            request_data = services.RequestData(
                team=team, namespace=namespace, resource=data.get("resource") or "",
                amount=data.get("amount"), justification=data.get("justification") or "",
                starts_at=data.get("starts_at"), ends_at=data.get("ends_at"),
                gpu_class=data.get("gpu_class"),
            )  # fmt: skip
            try:
                services.validate(self.user, request_data)
            except ValidationError as err:
                problems = err.message_dict
        for name, messages in problems.items():
            field = name if name in self.fields else None
            if field is not None and field in self.errors:
                continue
            for message in messages:
                self.add_error(field, message)


class RenewForm(PortalForm):
    ends_at = UTCDateTimeField(label="New end (UTC)", help_text="Times are UTC.")
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=2000,
        help_text="Why the GPUs are still needed.",
    )


class ReleaseForm(PortalForm):
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        max_length=2000,
        initial="No longer needed.",
        label="Note",
    )


class ApproveForm(PortalForm):
    amount = forms.IntegerField(
        required=False,
        min_value=1,
        widget=forms.NumberInput(attrs={"min": 1}),
        help_text="Empty: the amount asked. Smaller only.",
    )
    ends_at = UTCDateTimeField(
        required=False, label="End (UTC)", help_text="Empty: as asked. Earlier only."
    )
    note = forms.CharField(required=False, max_length=2000, widget=forms.TextInput)


class RejectForm(PortalForm):
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="The requester sees this.",
    )


class RequestFilterForm(forms.Form):
    status = forms.ChoiceField(
        required=False, choices=[("", "Any"), ("open", "Open"), *QuotaRequest.Status.choices]
    )
    team = forms.ChoiceField(required=False, choices=())
    cluster = forms.ChoiceField(required=False, choices=())
    q = forms.CharField(
        required=False, max_length=100, label="Search",
        help_text="namespace, resource, GPU class, requester or justification",
    )  # fmt: skip

    def __init__(self, *args, teams, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [("", "Any"), *((t.slug, t.name) for t in teams)]
        clusters = (
            TeamNamespace.objects.filter(team__in=teams)
            .values_list("cluster__slug", "cluster__name")
            .distinct()
            .order_by("cluster__name")
        )
        self.fields["cluster"].choices = [("", "Any"), *clusters]


class AuditFilterForm(forms.Form):
    action = forms.ChoiceField(required=False, choices=())
    team = forms.ChoiceField(required=False, choices=())
    actor = forms.CharField(required=False, max_length=150)
    since = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="Until", widget=forms.DateInput(attrs={"type": "date"})
    )

    def __init__(self, *args, teams, actions, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [("", "Any"), *((t.slug, t.name) for t in teams)]
        self.fields["action"].choices = [("", "Any"), *((a, a) for a in actions)]

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and until < since:
            self.add_error("until", "Must not be before “From”.")
        return data

    def filter(self, qs):
        data = self.cleaned_data
        if data.get("action"):
            qs = qs.filter(action=data["action"])
        if data.get("team"):
            qs = qs.filter(team__slug=data["team"])
        if data.get("actor"):
            qs = qs.filter(actor_name__iexact=data["actor"].strip())
        if data.get("since"):
            qs = qs.filter(at__date__gte=data["since"])
        if data.get("until"):
            qs = qs.filter(at__date__lte=data["until"])
        return qs


def audit_actions() -> list[str]:
    return list(AuditEvent.objects.order_by("action").values_list("action", flat=True).distinct())


class NotificationForm(forms.Form):
    """One checkbox per kind: checked means "send me these"."""

    def __init__(self, *args, kinds, **kwargs):
        super().__init__(*args, **kwargs)
        for value, label in kinds:
            self.fields[value] = forms.BooleanField(required=False, label=label.capitalize())

    @staticmethod
    def kinds_for(user) -> list[tuple[str, str]]:
        Kind = NotificationOptOut.Kind
        admin_only = {Kind.NEW_REQUEST, Kind.CONFIRM}
        return [(k, label) for k, label in Kind.choices if user.is_staff or k not in admin_only]


class OnboardForm(PortalForm):
    """Link an existing Kubernetes namespace to a team; its quotas are read at once."""

    team = forms.ModelChoiceField(queryset=Team.objects.all(), empty_label="Choose a team")
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all(), empty_label="Choose a cluster")
    name = forms.CharField(
        max_length=63,
        validators=[DNS_LABEL],
        label="Namespace",
        help_text="An existing namespace on that cluster.",
    )


class DecisionForm(PortalForm):
    """A decision on a foreign quota, or a confirmation: an optional note for the audit."""

    note = forms.CharField(required=False, max_length=2000, widget=forms.TextInput)
    # The values the confirmation page showed (JSON), checked again on POST.
    expected = forms.CharField(required=False, max_length=5000, widget=forms.HiddenInput)
