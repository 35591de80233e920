"""The portal account of a person the identity provider signed in.

Matched by issuer + ``sub`` (``SsoIdentity``), never by e-mail. On the first sign-in the
account is created (username from ``OIDC_USERNAME_CLAIM``, default ``preferred_username``,
else ``sub``; no usable password) - unless a local account already has that username:
then the sign-in is refused, since taking over a local account because the provider
reports the same name or e-mail would hand it to whoever controls that name at the
provider. ``OIDC_LINK_EXISTING`` changes that on purpose: ``username`` links the local
account of the same username, ``email`` the only local account whose e-mail equals the
provider's *verified* e-mail (``email_verified`` true). E-mail and names are updated at
every sign-in. Each step is audited (``sso.user_created``, ``sso.user_linked``,
``sso.user_updated``) and the group rules re-applied (``grants.apply``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from quotas.audit import record

from . import config, grants, mapping
from .models import SsoIdentity

log = logging.getLogger(__name__)
LINK_CHOICES = ("none", "username", "email")
PROFILE = ("email", "first_name", "last_name")


class Refused(Exception):
    """The provider signed the person in, but the portal will not (shown to them, 403)."""


def _text(claims: Mapping, name: str, limit: int) -> str:
    value = claims.get(name)
    return value.strip()[:limit] if isinstance(value, str) else ""


def username_for(claims: Mapping) -> str:
    name = mapping.claim(claims, settings.SSO_USERNAME_CLAIM)
    name = name.strip() if isinstance(name, str) else ""
    return (name or str(claims["sub"]))[:150]


def profile(claims: Mapping) -> dict[str, str]:
    first, last = _text(claims, "given_name", 150), _text(claims, "family_name", 150)
    if not (first or last):
        first = _text(claims, "name", 150)
    return {"email": _text(claims, "email", 254), "first_name": first, "last_name": last}


def _verified_email(claims: Mapping) -> str:
    verified = claims.get("email_verified") in (True, "true")
    return _text(claims, "email", 254) if verified else ""


def sign_in(claims: Mapping):
    """The account for these (verified) claims, created or linked; rules re-applied."""
    try:
        return _sign_in(claims)
    except IntegrityError:  # two first sign-ins of one person at once: the other won
        return _sign_in(claims)


@transaction.atomic
def _sign_in(claims: Mapping):
    subject = str(claims["sub"])
    # Only the identity row: a lock on the user row would block notices and audit rows
    # that other sign-ins write about this person while they hold a team (a deadlock).
    identity = (
        SsoIdentity.objects.select_for_update(of=("self",))
        .select_related("user")
        .filter(issuer=config.issuer(), subject=subject)
        .first()
    )
    if identity is None:
        identity = _first_sign_in(claims, subject)
    user = identity.user
    if not user.is_active:
        raise Refused(f"The portal account {user.get_username()!r} is deactivated.")
    _update_profile(user, claims)
    groups = mapping.groups_from_claims(claims, settings.SSO_GROUPS_CLAIM)
    identity.groups = groups
    identity.last_sign_in = timezone.now()
    identity.save(update_fields=["groups", "last_sign_in"])
    grants.apply(user, identity, groups)
    return user


def _first_sign_in(claims: Mapping, subject: str) -> SsoIdentity:
    users = get_user_model().objects
    username = username_for(claims)
    existing = users.filter(username__iexact=username).select_related("sso_identity").first()
    how = settings.SSO_LINK_EXISTING
    if existing is None and how == "email" and _verified_email(claims):
        found = list(users.filter(email__iexact=_verified_email(claims), sso_identity=None)[:2])
        existing = found[0] if len(found) == 1 else None
    if existing is not None:
        theirs = getattr(existing, "sso_identity", None)
        if theirs is not None and (theirs.issuer, theirs.subject) == (config.issuer(), subject):
            # This person's other first sign-in committed between our two reads.
            return SsoIdentity.objects.select_for_update(of=("self",)).get(pk=theirs.pk)
        if theirs is not None:
            raise Refused(
                f"The username {username!r} belongs to another single sign-on account. Ask a "
                "portal admin to rename one of them."
            )
        if not _may_link(existing, claims, how):
            raise Refused(
                f"A local portal account named {existing.get_username()!r} already exists, and "
                "single sign-on does not take over local accounts. Sign in with its password, "
                "or ask a portal admin (OIDC_LINK_EXISTING)."
            )
        identity = SsoIdentity.objects.create(
            user=existing, issuer=config.issuer(), subject=subject
        )
        record(None, "sso.user_linked", existing,
               after={"username": existing.get_username(), "subject": subject, "by": how},
               note=f"single sign-on: linked to the local account by {how}")  # fmt: skip
        return identity
    user = users.create_user(username, **profile(claims))  # no usable password
    identity = SsoIdentity.objects.create(user=user, issuer=config.issuer(), subject=subject)
    record(None, "sso.user_created", user,
           after={"username": username, "email": user.email, "subject": subject,
                  "issuer": config.issuer()},
           note="single sign-on: first sign-in")  # fmt: skip
    return identity


def _may_link(user, claims: Mapping, how: str) -> bool:
    if how == "username":
        return user.get_username().lower() == username_for(claims).lower()
    if how == "email":
        email = _verified_email(claims)
        return bool(email) and user.email.lower() == email.lower()
    return False


def _update_profile(user, claims: Mapping) -> None:
    new = profile(claims)
    if not new["email"]:
        new.pop("email")  # a provider that sends no e-mail keeps the one the portal has
    before = {k: getattr(user, k) for k in new}
    if before == new:
        return
    for key, value in new.items():
        setattr(user, key, value)
    user.save(update_fields=list(new))
    changed = [k for k in new if before[k] != new[k]]
    record(
        None, "sso.user_updated", user, before={k: before[k] for k in changed},
        after={k: new[k] for k in changed}, note="single sign-on: profile from the provider",
    )  # fmt: skip
