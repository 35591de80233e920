"""Account pages: the signed-in user's personal API tokens.

A new token's secret is rendered in the response to the POST that created it and nowhere
else: it is never stored, never put in the session, never sent in a redirect.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import never_cache

from .models import ApiToken


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        label="Token name",
        help_text="What uses it, e.g. “CI pipeline” or “laptop notebook”.",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the token a name.")
        return name


@never_cache
@login_required
def account(request: HttpRequest) -> HttpResponse:
    """List the user's tokens; POST creates one and shows its secret once."""
    new_token = new_raw = None
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            new_token, new_raw = ApiToken.issue(request.user, form.cleaned_data["name"])
            form = TokenForm()
    else:
        form = TokenForm()
    return render(
        request,
        "portal/account.html",
        {
            "form": form,
            "tokens": ApiToken.objects.filter(user=request.user),
            "new_token": new_token,
            "new_raw": new_raw,
        },
    )


@login_required
def revoke_token(request: HttpRequest, pk) -> HttpResponse:
    """GET asks for confirmation; POST revokes. Other users' tokens are a 404."""
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    if request.method == "POST":
        token.revoke()
        messages.success(request, f"Token “{token.name}” ({token.prefix}…) revoked.")
        return redirect("account")
    return render(request, "portal/token_revoke.html", {"token": token})


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico on pages without a <link rel="icon"> (JSON, the API).
    Resolved per request: with the manifest storage of production settings the hashed
    name exists only after collectstatic, not when the URLconf is imported."""
    return redirect(static("img/favicon.svg"), permanent=True)
