"""Single sign-on with OpenID Connect, IdP groups mapped to teams (issue #12 section 1).

Off unless ``OIDC_ISSUER``, ``OIDC_CLIENT_ID`` and ``OIDC_CLIENT_SECRET`` are set
(portal/settings.py). mozilla-django-oidc runs the authorization code flow under /sso/;
``backend.SsoBackend`` turns the provider's claims into an account (``accounts``) and
re-applies the admin-editable group rules (``models.GroupRule``, ``mapping``, ``grants``)
at every sign-in. Local accounts keep working beside it.
"""
