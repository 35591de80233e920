"""MIG pages: the fleet's MIG nodes, one node's GPUs drawn slice by slice (current vs
proposed), and MIG requests (new, list, detail with the coordinator's steps, decisions).

Thin views: the rules live in ``mig.layout`` and ``mig.services``; this module only works
out what to draw. A GPU is drawn as its compute slices over its memory slices, each MIG
instance a labelled block at the memory slices its placement gives (``layout.place``).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from discussion import progress as live_progress
from discussion import thread
from inventory.models import GPU_RESOURCE, Node
from quotas import decision_time
from quotas.models import Team, TeamNamespace
from quotas.scoping import visible_to

from . import services
from .catalog import PRODUCTS
from .drawing import (
    _node_drawings,
    _proposed,
    balanced_layout,
    catalog_json,
    draw_layout,
)
from .forms import (
    ApproveForm,
    CancelForm,
    MigRequestForm,
    RejectForm,
    layout_text,
    parse_layout,
    profile_field_name,
)
from .models import MigRequest, TransitionError

REQUESTS_PER_PAGE = 25
NODE_RUNS_SHOWN = 10

# -- pages: fleet and node -----------------------------------------------------------------


def _mig_nodes() -> QuerySet[Node]:
    return (
        Node.objects.present()
        .filter(mig_capable=True)
        .select_related("cluster")
        .prefetch_related("resources")
        .order_by("cluster__slug", "name")
    )


@login_required
def index(request: HttpRequest) -> HttpResponse:
    groups: dict[str, dict] = {}
    for node in _mig_nodes():
        product = services.product_of(node)
        key = product.name if product else f"unknown:{node.base_product}"
        group = groups.setdefault(key, {"product": product, "name": node.base_product, "nodes": []})
        node.mig_resources = [r for r in node.resources.all() if r.resource != GPU_RESOURCE]
        node.gpu_resource = next(
            (r for r in node.resources.all() if r.resource == GPU_RESOURCE), None
        )
        group["nodes"].append(node)
    ordered = sorted(groups.values(), key=lambda g: (g["product"] is None, g["name"]))
    return render(
        request,
        "mig/index.html",
        {
            "groups": ordered,
            "other_products": [p for p in PRODUCTS.values() if p.name not in groups],
        },
    )


@login_required
def node_view(request: HttpRequest, pk) -> HttpResponse:
    node = get_object_or_404(
        Node.objects.select_related("cluster").prefetch_related("resources"), pk=pk
    )
    product = services.product_of(node) if node.mig_capable else None
    ctx: dict = {"node": node, "product": product}
    if product is not None:
        strategy = services.node_strategy(node)
        gpus, source = _node_drawings(node, product)
        ctx.update(
            strategy=strategy,
            example=layout_text(balanced_layout(product)),
            gpus=gpus,
            source=source,
            mig_resources=[r for r in node.resources.all() if r.resource.startswith("nvidia.com/")],
            runs=list(
                visible_to(MigRequest.objects.filter(node=node), request.user)
                .select_related("team", "namespace")
                .order_by("-created_at")[:NODE_RUNS_SHOWN]
            ),
        )
        text = request.GET.get("layout", "").strip()
        if text:
            ctx["proposed"] = _proposed(product, text, strategy)
    return render(request, "mig/node.html", ctx)


# -- pages: requests -----------------------------------------------------------------------


def visible_requests(user) -> QuerySet[MigRequest]:
    qs = MigRequest.objects.select_related(
        "team", "namespace", "cluster", "requested_by", "decided_by", "node"
    )
    return visible_to(qs, user)


def _products_for(teams: QuerySet[Team]) -> dict[str, list]:
    """Catalog products of present MIG-capable nodes with MIG enabled (a single or mixed
    strategy) in the clusters of ``teams``' namespaces: {product: [clusters]} (one query)."""
    clusters = TeamNamespace.objects.filter(team__in=teams).values("cluster_id")
    out: dict[str, list] = {}
    nodes = _mig_nodes().filter(cluster__in=clusters, mig_strategy__in=services.STRATEGIES)
    for node in nodes.prefetch_related(None):
        product = services.product_of(node)
        if product is not None and node.cluster not in out.setdefault(product.name, []):
            out[product.name].append(node.cluster)
    return {name: out[name] for name in PRODUCTS if name in out}


def _strategies(form: MigRequestForm) -> dict[str, str]:
    """``"<namespace id>|<product>"`` -> the strategy the layout is checked under."""
    namespaces = form.fields["namespace"].queryset
    out = {}
    for ns in namespaces:
        for product in form.products:
            nodes = services.mig_nodes(ns.cluster, product)
            if nodes:
                out[f"{ns.pk}|{product.name}"] = services.cluster_strategy(nodes)
    return out


def _initial_from_query(request: HttpRequest) -> dict:
    """``?product=A100-80GB&layout=3g.40gb:1`` (the node page's "Request this layout")."""
    initial: dict = {k: request.GET[k] for k in ("product", "gpus") if request.GET.get(k)}
    product = PRODUCTS.get(initial.get("product", ""))
    if product is not None:
        lay, _ = parse_layout(request.GET.get("layout", ""))
        for name, count in lay.items():
            if name in product.profiles:
                initial[profile_field_name(product, name)] = count
    return initial


@login_required
def request_new(request: HttpRequest) -> HttpResponse:
    user = request.user
    teams = visible_to(Team.objects.all(), user, "pk")
    products = _products_for(teams)
    initial = _initial_from_query(request)
    form = MigRequestForm(
        request.POST or None, initial=initial, teams=teams, user=user, products=products
    )
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        data = services.MigRequestData(
            team=d["team"], namespace=d["namespace"], product=d["product"], layout=d["layout"],
            gpus=d["gpus"], justification=d["justification"], node=d.get("node"),
        )  # fmt: skip
        try:
            req = services.submit(user, data)
        except ValidationError as err:
            form.add_service_errors(err.message_dict)
        else:
            messages.success(request, "MIG request submitted: the portal admins have been told.")
            return redirect("mig:request", pk=req.pk)
    product = form.chosen_product()
    preview = None
    if product is not None:
        lay = form.cleaned_data.get("layout") if form.is_bound else None
        if lay and not any(name in form.errors for name in ("layout",)):
            preview = draw_layout(product, lay, "Each requested GPU")
    return render(
        request,
        "mig/request_new.html",
        {
            "form": form,
            "no_teams": not teams.exists(),
            "no_products": not products,
            "preview": preview,
            "mig_catalog": catalog_json(),
            "mig_strategies": _strategies(form) if products else {},
        },
    )


@login_required
def request_list(request: HttpRequest) -> HttpResponse:
    qs = visible_requests(request.user)
    status = request.GET.get("status", "")
    if status == "open":
        qs = qs.filter(status__in=MigRequest.OPEN)
    elif status in MigRequest.Status.values:
        qs = qs.filter(status=status)
    else:
        status = ""
    page = Paginator(qs, REQUESTS_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "mig/request_list.html",
        {"page": page, "status": status, "statuses": MigRequest.Status.values},
    )


def _can_cancel(user, req: MigRequest) -> bool:
    if req.status != MigRequest.Status.PENDING:
        return False
    return user.is_staff or req.requested_by_id == user.pk or services.is_manager(user, req.team)


def _detail_context(request: HttpRequest, req: MigRequest, **forms) -> dict:
    user = request.user
    product = PRODUCTS.get(req.product)
    drawing = draw_layout(product, req.layout, "Each GPU") if product and req.layout else None
    ctx: dict = {
        "req": req,
        "product": product,
        "drawing": drawing,
        "drawing_list": [drawing] if drawing else [],
        "layout_query": layout_text(req.layout),
        "steps": (steps := list(req.steps.all())),
        # the stuck policy (mig/state_steps.py): failed with the node left cordoned
        "stuck": req.status == MigRequest.Status.FAILED and any(s.data.get("stuck") for s in steps),
        "can_cancel": _can_cancel(user, req),
        "can_revert": user.is_staff and req.can_revert,
        "reverts": list(req.reverted_by.order_by("-created_at")),
    }
    # Comment thread, live progress, typical time to a decision (discussion app).
    ctx.update(thread.context(req, forms.get("comment_form")))
    ctx.update(live_progress.mig_context(req))
    if req.status == MigRequest.Status.PENDING:
        ctx["decision"] = decision_time.mig_decisions()
    if user.is_staff and req.status == MigRequest.Status.PENDING:
        proposals = services.with_health(services.propose_nodes(req))
        best = services.preferred(proposals)
        nodes = Node.objects.filter(pk__in=[p.node.pk for p in proposals])
        ctx.update(
            proposals=proposals,
            preferred=best,
            approve_form=forms.get("approve_form")
            or ApproveForm(nodes=nodes, proposals=proposals, preferred=best),
            reject_form=forms.get("reject_form") or RejectForm(),
        )
    return ctx


@login_required
def request_detail(request: HttpRequest, pk) -> HttpResponse:
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    return render(request, "mig/request_detail.html", _detail_context(request, req))


def _staff_only(user) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only portal admins can do this.")


@require_POST
@login_required
def request_approve(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    nodes = Node.objects.present().filter(cluster=req.cluster, mig_capable=True)
    form = ApproveForm(request.POST, nodes=nodes)
    if form.is_valid():
        d = form.cleaned_data
        try:
            services.approve(req, request.user, node=d["node"],
                             drain_policy=d["drain_policy"], note=d["note"])  # fmt: skip
        except TransitionError:
            messages.warning(request, "This request was already decided.")
            return redirect("mig:request", pk=req.pk)
        except ValidationError as err:
            form.add_service_errors(err.message_dict)
        else:
            messages.success(request, f"Approved on {d['node'].name}: the reconfiguration starts.")
            return redirect("mig:request", pk=req.pk)
    messages.error(request, "Not approved: see the approval form below.")
    ctx = _detail_context(request, req, approve_form=form)
    return render(request, "mig/request_detail.html", ctx, status=400)


@require_POST
@login_required
def request_reject(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    form = RejectForm(request.POST)
    if form.is_valid():
        try:
            services.reject(req, request.user, form.cleaned_data["reason"])
        except TransitionError:
            messages.warning(request, "This request was already decided.")
        else:
            messages.success(request, "MIG request rejected.")
        return redirect("mig:request", pk=req.pk)
    messages.error(request, "Not rejected: say why.")
    ctx = _detail_context(request, req, reject_form=form)
    return render(request, "mig/request_detail.html", ctx, status=400)


@login_required
def request_cancel(request: HttpRequest, pk) -> HttpResponse:
    """GET asks for confirmation; POST withdraws the pending request."""
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    if not _can_cancel(request.user, req) and req.status == MigRequest.Status.PENDING:
        raise PermissionDenied("Only the requester, a team manager or an admin may cancel.")
    form = CancelForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.cancel(req, request.user, note=form.cleaned_data["note"])
        except PermissionError as err:
            raise PermissionDenied(str(err)) from err
        except TransitionError:
            messages.warning(request, f"This request is already {req.status}: nothing to cancel.")
        else:
            messages.success(request, "MIG request cancelled.")
        return redirect("mig:request", pk=req.pk)
    return render(request, "mig/request_cancel.html", {"req": req, "form": form})


@require_POST
@login_required
def request_revert(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    try:
        run = services.revert(req, request.user)
    except TransitionError as err:
        messages.warning(request, str(err))
        return redirect("mig:request", pk=req.pk)
    except ValidationError as err:
        messages.error(request, " ".join(err.messages))
        return redirect("mig:request", pk=req.pk)
    messages.success(request, f"Reverting {req.node.name} to {run.config_name}.")
    return redirect("mig:request", pk=run.pk)
