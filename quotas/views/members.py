"""A team's members: every member sees who is in the team; its managers (and portal
admins) add people, change roles and remove people. Rules in ``quotas.membership``."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from .. import membership
from ..forms import PortalForm
from ..models import Membership, Team
from .common import visible_teams

Role = Membership.Role


class AddMemberForm(PortalForm):
    user = forms.CharField(
        label="Username or e-mail",
        max_length=254,
        help_text="People get an account when they first sign in to the portal.",
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(PortalForm):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices)


def _team(request: HttpRequest, slug: str) -> Team:
    return get_object_or_404(visible_teams(request.user), slug=slug)


def _may_manage(request: HttpRequest, team: Team) -> None:
    if not membership.can_manage(request.user, team):
        raise PermissionDenied("Only the team's managers and portal admins can change its members.")


@login_required
def team_members(request: HttpRequest, slug: str) -> HttpResponse:
    """GET: the member list. POST ``action=add`` adds someone, ``action=role`` sets a role."""
    team = _team(request, slug)
    can_manage = membership.can_manage(request.user, team)
    add_form = AddMemberForm(prefix="add")
    confirm_demote = False
    if request.method == "POST":
        _may_manage(request, team)
        if request.POST.get("action") == "add":
            add_form = AddMemberForm(request.POST, prefix="add")
            if add_form.is_valid() and _add(request, team, add_form):
                return redirect("quotas:team-members", slug=team.slug)
        else:
            form = RoleForm(request.POST)
            if _demotes_self(request, team, form) and request.POST.get("confirm") != "yes":
                confirm_demote = True  # asked first: shown below, nothing changed yet
            else:
                _set_role(request, team, form)
                return redirect("quotas:team-members", slug=team.slug)
    people = sorted(
        # ``sso``: the membership single sign-on manages, if it does (portal/sso/).
        team.memberships.select_related("user", "sso"),
        key=lambda m: (m.role != Role.MANAGER, m.user.get_username().lower()),
    )
    managers = sum(m.role == Role.MANAGER for m in people)
    return render(
        request,
        "quotas/members.html",
        {"team": team, "people": people, "managers": managers, "can_manage": can_manage,
         "add_form": add_form, "roles": Role.choices, "confirm_demote": confirm_demote},
    )  # fmt: skip


def _demotes_self(request: HttpRequest, team: Team, form: RoleForm) -> bool:
    """A manager making themself a member: they lose the right to undo it."""
    if not form.is_valid() or form.cleaned_data["role"] != Role.MEMBER:
        return False
    if form.cleaned_data["username"] != request.user.get_username():
        return False
    managers = team.memberships.filter(role=Role.MANAGER)
    # the last manager is refused anyway (quotas/membership.py): no question to ask then
    return managers.filter(user=request.user).exists() and managers.count() > 1


def _add(request: HttpRequest, team: Team, form: AddMemberForm) -> bool:
    data = form.cleaned_data
    try:
        m = membership.add_member(team, data["user"], data["role"], request.user)
    except ValidationError as err:
        form.add_service_errors(err.message_dict)
        return False
    except membership.MembershipConflict as err:
        form.add_error("user", str(err))
        return False
    messages.success(request, f"Added {m.user.get_username()} to {team.name} as {m.role}.")
    return True


def _set_role(request: HttpRequest, team: Team, form: RoleForm) -> None:
    if not form.is_valid():
        messages.error(request, "Choose a role for a member of the list.")
        return
    username, role = form.cleaned_data["username"], form.cleaned_data["role"]
    try:
        membership.set_role(team, username, role, request.user)
    except (ValidationError, membership.MembershipConflict) as err:
        messages.error(request, " ".join(getattr(err, "messages", [str(err)])))
        return
    messages.success(request, f"{username} is now a {role} of {team.name}.")


@login_required
def team_member_remove(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    """GET asks for confirmation; POST removes the person from the team."""
    team = _team(request, slug)
    _may_manage(request, team)
    m = get_object_or_404(team.memberships.select_related("user"), user__username=username)
    problem = None
    if request.method == "POST":
        try:
            membership.remove_member(team, username, request.user)
        except membership.MembershipConflict as err:
            problem = str(err)
        else:
            messages.success(request, f"Removed {username} from {team.name}.")
            if m.user_id == request.user.pk and not request.user.is_staff:
                return redirect("quotas:teams")  # no longer in the team
            return redirect("quotas:team-members", slug=team.slug)
    last = (
        m.role == Role.MANAGER
        and not team.memberships.filter(role=Role.MANAGER).exclude(pk=m.pk).exists()
    )
    return render(
        request,
        "quotas/member_remove.html",
        {"team": team, "m": m, "last_manager": last, "problem": problem,
         "self_removal": m.user_id == request.user.pk},
    )  # fmt: skip
