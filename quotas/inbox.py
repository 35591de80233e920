"""One list of quota and MIG requests: the admins' approval queue and a team's requests.

Quota requests (``QuotaRequest``) and MIG requests (``mig.models.MigRequest``) are two
tables; the lists page through both at once. Both querysets are reduced to the same four
columns (id, filed, size, source) and joined with ``UNION ALL``, so filtering, sorting,
counting and slicing happen in PostgreSQL; only the page's rows are then loaded, one query
per kind. The callers pass querysets already scoped to the user (``quotas.scoping``), so
a filter can only narrow what the user may see.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django import forms
from django.core.paginator import Page, Paginator
from django.db.models import CharField, F, Q, QuerySet, Value
from django.utils import timezone

from inventory.models import GpuClass
from mig import catalog
from mig.models import MigRequest

from .models import QuotaRequest, Team

QUOTA, MIG = "quota", "mig"
PRODUCT_LABEL = "nvidia.com/gpu.product"

KIND_CHOICES = [
    ("", "Any kind"),
    (QuotaRequest.Kind.NEW, "Quota: new grant"),
    (QuotaRequest.Kind.RENEWAL, "Quota: renewal"),
    (QuotaRequest.Kind.RELEASE, "Quota: release"),
    (MIG, "MIG layout"),
]
AGE_CHOICES = [
    ("", "Any age"),
    ("1", "Waiting over 1 day"),
    ("3", "Waiting over 3 days"),
    ("7", "Waiting over a week"),
]
SORT_CHOICES = [
    ("oldest", "Oldest first"),
    ("newest", "Newest first"),
    ("amount", "Largest amount first"),
]
# The union's ORDER BY: its columns are named by the select list (see ``_columns``).
ORDERINGS = {
    "oldest": ("created_at", "id"),
    "newest": ("-created_at", "-id"),
    "amount": ("-size", "created_at", "id"),
}


class InboxFilterForm(forms.Form):
    """Filters of the approval queue (and, with ``statuses``, of a team's request list)."""

    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        help_text="Team, requester or words of the justification.",
    )
    team = forms.ChoiceField(required=False, choices=())
    gpu_class = forms.ChoiceField(required=False, choices=(), label="GPU class")
    kind = forms.ChoiceField(required=False, choices=KIND_CHOICES)
    age = forms.ChoiceField(required=False, choices=AGE_CHOICES)
    sort = forms.ChoiceField(required=False, choices=SORT_CHOICES)

    def __init__(self, *args, teams, classes, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [("", "Any team"), *((t.slug, t.name) for t in teams)]
        self.classes = {str(c.pk): c for c in classes}
        self.fields["gpu_class"].choices = [
            ("", "Any class"),
            *((pk, f"{c.cluster.slug}: {c.name}") for pk, c in self.classes.items()),
        ]

    def filters(self) -> Filters:
        """The chosen filters; an invalid form lists nothing (the page says why)."""
        if not self.is_bound:
            return Filters()
        if not self.is_valid():
            return Filters(invalid=True)
        d = self.cleaned_data
        return Filters(
            q=d["q"].strip(),
            team=d["team"],
            gpu_class=self.classes.get(d["gpu_class"]),
            kind=d["kind"],
            age_days=int(d["age"]) if d["age"] else None,
            sort=d["sort"] or "oldest",
        )


def filter_form(data, user=None) -> InboxFilterForm:
    """The filter form with the teams and GPU classes ``user`` may pick (admins: all)."""
    from .scoping import visible_to

    teams = Team.objects.order_by("name")
    classes = GpuClass.objects.select_related("cluster").order_by("cluster__slug", "name")
    if user is not None:
        teams = visible_to(teams, user, "pk")
        mine = visible_to(Team.objects.all(), user, "pk").values("namespaces__cluster")
        classes = classes if user.is_staff else classes.filter(cluster__in=mine)
    return InboxFilterForm(data or None, teams=list(teams), classes=list(classes))


@dataclass(frozen=True)
class Filters:
    q: str = ""
    team: str = ""
    gpu_class: GpuClass | None = None
    kind: str = ""
    age_days: int | None = None
    sort: str = "oldest"
    invalid: bool = False

    @property
    def active(self) -> bool:
        return bool(
            self.q or self.team or self.gpu_class or self.kind or self.age_days or self.invalid
        )


def class_product(gpu_class: GpuClass) -> str | None:
    """The MIG catalog name of a class's GPU product (``A100-80GB``), if it has one."""
    try:
        return catalog.resolve_product(gpu_class.selector.get(PRODUCT_LABEL, "")).name
    except catalog.UnknownProduct:
        return None


def apply_filters(
    quota: QuerySet[QuotaRequest], mig: QuerySet[MigRequest], f: Filters
) -> tuple[QuerySet[QuotaRequest], QuerySet[MigRequest]]:
    """Both querysets narrowed by ``f``. A MIG request is of a GPU class when it is on
    the class's cluster and asks for the class's product."""
    if f.invalid:
        return quota.none(), mig.none()
    if f.team:
        quota, mig = quota.filter(team__slug=f.team), mig.filter(team__slug=f.team)
    if f.gpu_class is not None:
        quota = quota.filter(gpu_class=f.gpu_class)
        product = class_product(f.gpu_class)
        mig = (
            mig.filter(cluster_id=f.gpu_class.cluster_id, product=product)
            if product
            else mig.none()
        )
    if f.kind == MIG:
        quota = quota.none()
    elif f.kind:
        quota, mig = quota.filter(kind=f.kind), mig.none()
    if f.age_days:
        before = timezone.now() - timedelta(days=f.age_days)
        quota, mig = quota.filter(created_at__lte=before), mig.filter(created_at__lte=before)
    if f.q:
        quota, mig = quota.filter(_search(f.q)), mig.filter(_search(f.q))
    return quota, mig


def _search(text: str) -> Q:
    q = (
        Q(team__name__icontains=text)
        | Q(team__slug__icontains=text)
        | Q(requested_by__username__icontains=text)
        | Q(justification__icontains=text)
    )
    with contextlib.suppress(ValueError):
        q |= Q(pk=uuid.UUID(text))
    return q


def _columns(qs: QuerySet, source: str, size: str) -> QuerySet:
    """id, created_at, size, source: the same columns in the same order for both kinds."""
    return (
        qs.order_by()
        .annotate(size=F(size), source=Value(source, output_field=CharField()))
        .values_list("id", "created_at", "size", "source")
    )


def page_of(
    quota: QuerySet[QuotaRequest],
    mig: QuerySet[MigRequest],
    *,
    sort: str = "oldest",
    number=None,
    per_page: int = 20,
) -> Page:
    """One page of both kinds, sorted; ``page.object_list`` holds the loaded requests
    (QuotaRequest and MigRequest rows, each with ``is_mig``), in order."""
    union = _columns(quota, QUOTA, "amount").union(_columns(mig, MIG, "gpus"), all=True)
    union = union.order_by(*ORDERINGS.get(sort, ORDERINGS["oldest"]))
    page = Paginator(union, per_page).get_page(number)
    keys = list(page.object_list)
    ids = {QUOTA: [k[0] for k in keys if k[3] == QUOTA], MIG: [k[0] for k in keys if k[3] == MIG]}
    loaded = {}
    if ids[QUOTA]:
        loaded.update({(QUOTA, r.pk): r for r in quota.filter(pk__in=ids[QUOTA])})
    if ids[MIG]:
        loaded.update({(MIG, r.pk): r for r in mig.filter(pk__in=ids[MIG])})
    rows = []
    for pk, _, _, source in keys:
        obj = loaded.get((source, pk))
        if obj is not None:  # decided and gone from the scope between the two queries
            obj.is_mig = source == MIG
            rows.append(obj)
    page.object_list = rows
    return page


# A quota request's status and the MIG status that means the same to a requester.
MIG_STATUS_FOR = {
    QuotaRequest.Status.APPLYING: MigRequest.Status.RUNNING,
    QuotaRequest.Status.APPLIED: MigRequest.Status.SUCCEEDED,
}


def by_status(
    quota: QuerySet[QuotaRequest], mig: QuerySet[MigRequest], status: str
) -> tuple[QuerySet[QuotaRequest], QuerySet[MigRequest]]:
    """Both kinds with ``status`` ("open", a quota status, or "" for any). A MIG run
    that is reconfiguring counts as applying, a finished one as applied."""
    if status == "open":
        return quota.filter(status__in=QuotaRequest.OPEN), mig.filter(status__in=MigRequest.OPEN)
    if not status:
        return quota, mig
    mig_status = MIG_STATUS_FOR.get(status, status)
    mig = mig.filter(status=mig_status) if mig_status in MigRequest.Status.values else mig.none()
    return quota.filter(status=status), mig
