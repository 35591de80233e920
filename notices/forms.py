"""The webhook form: parses fields; ``notices.webhook_config`` validates and saves."""

from __future__ import annotations

from django import forms

from quotas.forms import PortalForm
from quotas.models import Team

from .models import Event, Webhook


class WebhookForm(PortalForm):
    name = forms.CharField(max_length=100)
    url = forms.CharField(
        label="URL", max_length=500,
        help_text="Where to POST: an http:// or https:// URL (a Slack incoming webhook URL "
        "for the Slack format).",
    )  # fmt: skip
    format = forms.ChoiceField(choices=Webhook.Format.choices, widget=forms.RadioSelect)
    events = forms.MultipleChoiceField(
        choices=Event.choices, required=False, widget=forms.CheckboxSelectMultiple,
        help_text="Tick none for every event.",
    )  # fmt: skip
    team = forms.ModelChoiceField(
        queryset=Team.objects.order_by("name"), required=False, empty_label="Every team",
        help_text="Only this team's events (events of no team are not sent).",
    )  # fmt: skip
    secret = forms.CharField(
        required=False, max_length=200, strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="The HMAC key of the X-Portal-Signature header; required for the generic "
        "format. Never shown again after saving.",
    )  # fmt: skip
    clear_secret = forms.BooleanField(required=False, label="Remove the stored secret")
    active = forms.BooleanField(
        required=False, initial=True, label="Active", help_text="Untick to pause deliveries."
    )

    def __init__(self, *args, instance: Webhook | None = None, **kwargs):
        self.instance = instance
        if instance is not None:
            kwargs.setdefault("initial", {
                "name": instance.name, "url": instance.url, "format": instance.format,
                "events": instance.events, "team": instance.team_id, "active": instance.active,
            })  # fmt: skip
        super().__init__(*args, **kwargs)
        if instance is not None and instance.secret:
            self.fields[
                "secret"
            ].help_text = "A secret is set. Leave empty to keep it; type a new one to replace it."
        else:
            del self.fields["clear_secret"]

    def domain_fields(self) -> dict:
        data = self.cleaned_data
        fields = {k: data[k] for k in ("name", "url", "format", "events", "team", "active")}
        if data.get("clear_secret"):
            fields["secret"] = ""
        elif data.get("secret"):
            fields["secret"] = data["secret"]
        elif self.instance is None:
            fields["secret"] = ""
        return fields
