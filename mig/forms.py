"""Forms of the MIG pages. They parse input; the rules live in ``mig.layout`` and
``mig.services``, whose field-level ``ValidationError`` messages the views put back here.

A layout is entered as one number per profile. The new-request form carries a fieldset per
product the user's clusters have; only the chosen product's numbers are read (the page's
script hides the others, and without it the legends say which is which).
"""

from __future__ import annotations

import re

from django import forms
from django.db.models import Case, When

from inventory.models import Cluster, Node
from quotas.forms import PortalForm
from quotas.models import Team, TeamNamespace

from . import services
from .catalog import PRODUCTS, Product
from .models import MigRequest

_ITEM_RE = re.compile(r"^\s*(?P<profile>[^:=\s]+)\s*[:=x]\s*(?P<count>-?\d+)\s*$")


def parse_layout(text: str) -> tuple[dict[str, int], list[str]]:
    """``"3g.40gb:1,1g.10gb:2"`` -> ``({"3g.40gb": 1, "1g.10gb": 2}, [])``.

    Counts of 0 are dropped; anything unreadable gives a message instead of a guess.
    """
    out: dict[str, int] = {}
    errors: list[str] = []
    for item in (text or "").replace(";", ",").split(","):
        # A query string turns "+" into a space: "1g.10gb me:1" means "1g.10gb+me:1".
        item = re.sub(r"\s+me\b", "+me", item.strip())
        if not item:
            continue
        match = _ITEM_RE.match(item)
        if not match:
            errors.append(f"Cannot read {item.strip()!r}: write profile:count, e.g. 3g.40gb:1.")
            continue
        count = int(match["count"])
        if count < 0:
            errors.append(f"{match['profile']}: the number of instances cannot be negative.")
        elif count:
            out[match["profile"]] = out.get(match["profile"], 0) + count
    return out, errors


def layout_text(layout: dict[str, int]) -> str:
    """The inverse of :func:`parse_layout`, for links and the hidden field."""
    return ",".join(f"{name}:{count}" for name, count in layout.items())


def profile_field_name(product: Product, profile: str) -> str:
    """``A100-80GB``, ``1g.10gb+me`` -> ``p-a100-80gb-1g-10gb-me`` (safe as a name and id)."""
    return "p-" + re.sub(r"[^a-z0-9]+", "-", f"{product.name}-{profile}".lower()).strip("-")


class MigRequestForm(PortalForm):
    """A new MIG request: where, which product, the layout of one GPU and how many GPUs."""

    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label="Choose a team")
    namespace = forms.ModelChoiceField(
        queryset=TeamNamespace.objects.none(),
        empty_label="Choose a namespace",
        help_text="A namespace of the chosen team; the MIG resources are granted to it.",
    )
    product = forms.ChoiceField(
        choices=(), help_text="GPU products of MIG-capable nodes in your teams' clusters."
    )
    gpus = forms.IntegerField(
        min_value=1,
        label="Number of GPUs",
        initial=1,
        widget=forms.NumberInput(attrs={"min": 1}),
        help_text="Each of these GPUs gets the layout below.",
    )
    node = forms.ModelChoiceField(
        queryset=Node.objects.none(),
        required=False,
        empty_label="Let the portal propose nodes",
        help_text="Admins only: ask for this node.",
    )
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        max_length=2000,
        help_text="What the MIG instances are for; the admins read this.",
    )
    # Filled in by clean() from the per-profile numbers; carries the layout's errors.
    layout = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, teams, user, products: dict[str, list[Cluster]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams
        namespaces = TeamNamespace.objects.filter(team__in=teams).select_related("cluster", "team")
        self.fields["namespace"].queryset = namespaces
        self.fields["namespace"].label_from_instance = lambda ns: (
            f"{ns.cluster.slug}/{ns.name} ({ns.team.slug})"
        )
        self.products = [PRODUCTS[name] for name in products]
        self.fields["product"].choices = [
            (name, f"{name} ({', '.join(c.slug for c in clusters)})")
            for name, clusters in products.items()
        ]
        if user.is_staff:
            self.fields["node"].queryset = (
                Node.objects.present()
                .filter(cluster__in={c.pk for cs in products.values() for c in cs})
                .filter(mig_capable=True, mig_strategy__in=services.STRATEGIES)
                .select_related("cluster")
                .order_by("cluster__slug", "name")
            )
            self.fields["node"].label_from_instance = lambda n: (
                f"{n.cluster.slug}/{n.name} ({n.gpu_count} x {n.base_product})"
            )
        else:
            del self.fields["node"]
        self.profile_fields: dict[str, list[tuple[str, str]]] = {}
        for product in self.products:
            names = []
            for profile in product.profiles.values():
                name = profile_field_name(product, profile.name)
                self.fields[name] = forms.IntegerField(
                    required=False,
                    min_value=0,
                    max_value=profile.max_count,
                    label=profile.name,
                    widget=forms.NumberInput(
                        attrs={
                            "min": 0,
                            "max": profile.max_count,
                            "data-profile": profile.name,
                            "inputmode": "numeric",
                        }
                    ),
                    help_text=f"max {profile.max_count}",
                )
                names.append((name, profile.name))
            self.profile_fields[product.name] = names
        if not self.is_bound:
            # One team (with several namespaces) or one namespace: nothing to choose there,
            # as on the quota form.
            only_teams = list(self.fields["team"].queryset[:2])
            if len(only_teams) == 1:
                self.initial.setdefault("team", only_teams[0].pk)
            only_namespaces = list(namespaces[:2])
            if len(only_namespaces) == 1:
                self.initial.setdefault("namespace", only_namespaces[0].pk)
                self.initial.setdefault("team", only_namespaces[0].team_id)

    def chosen_product(self) -> Product | None:
        """The product whose numbers count: the submitted one, else the first choice."""
        value = self["product"].value()
        if value in PRODUCTS and value in self.profile_fields:
            return PRODUCTS[value]
        return self.products[0] if self.products else None

    def product_fieldsets(self) -> list[dict]:
        """Per product: its number inputs (bound fields), for the template."""
        chosen = self.chosen_product()
        return [
            {
                "product": product,
                "chosen": chosen is not None and product.name == chosen.name,
                "fields": [self[name] for name, _ in self.profile_fields[product.name]],
            }
            for product in self.products
        ]

    def layout_of(self, product: Product) -> dict[str, int]:
        """The chosen numbers (0 and empty left out), from cleaned data."""
        data = self.cleaned_data
        return {
            profile: data[name]
            for name, profile in self.profile_fields.get(product.name, [])
            if data.get(name)
        }

    def clean(self):
        data = super().clean()
        product = PRODUCTS.get(data.get("product") or "")
        if product is not None:
            # Errors of other products' numbers do not matter: those are not read.
            for other, names in self.profile_fields.items():
                if other != product.name:
                    for name, _ in names:
                        self.errors.pop(name, None)
            data["layout"] = self.layout_of(product)
            if not data["layout"]:
                self.add_error("layout", "Enter at least one instance for the GPU.")
        ns, team = data.get("namespace"), data.get("team")
        if ns is not None and team is not None and ns.team_id != team.pk:
            self.add_error("namespace", f"Namespace {ns.name} does not belong to team {team}.")
        return data


class ApproveForm(PortalForm):
    node = forms.ModelChoiceField(queryset=Node.objects.none(), empty_label="Choose a node")
    drain_policy = forms.ChoiceField(
        choices=MigRequest.DrainPolicy.choices,
        widget=forms.RadioSelect,
        initial=MigRequest.DrainPolicy.WAIT,
        label="Drain policy",
    )
    note = forms.CharField(required=False, max_length=2000)

    def __init__(self, *args, nodes, proposals=(), preferred=None, **kwargs):
        """``proposals`` (ranked, ``mig.services.propose_nodes``) order the choices and
        label them; ``preferred`` is preselected (the top-ranked healthy proposal)."""
        super().__init__(*args, **kwargs)
        rank = {p.node.pk: i for i, p in enumerate(proposals)}
        if rank:
            nodes = nodes.order_by(
                Case(*(When(pk=pk, then=i) for pk, i in rank.items()), default=len(rank)),
                "name",
            )
            labels = {p.node.pk: _proposal_label(p) for p in proposals}
            self.fields["node"].label_from_instance = lambda n: labels.get(n.pk, n.name)
        self.fields["node"].queryset = nodes
        if not self.is_bound:
            first = preferred.node if preferred is not None else nodes.first()
            if first is not None:
                self.initial.setdefault("node", first.pk)


def _proposal_label(p) -> str:
    """``a100-01: idle`` / ``a100-00: 2 GPU pods; Unhealthy GPU`` for the node choice."""
    if p.in_config:
        what = "already in this layout"
    elif p.idle:
        what = "idle"
    else:
        what = f"{len(p.pods)} GPU pod{'s' if len(p.pods) != 1 else ''}"
    problems = [b.label for b in getattr(p.node, "badges", []) if b.level in ("warning", "error")]
    return f"{p.node.name}: {what}" + (f"; {', '.join(problems)}" if problems else "")


class RejectForm(PortalForm):
    reason = forms.CharField(max_length=2000, help_text="The requester sees it.")


class CancelForm(PortalForm):
    note = forms.CharField(required=False, max_length=2000)
