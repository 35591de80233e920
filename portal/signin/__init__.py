"""Sign-in that cannot be guessed (issue #11, docs/security.md "Sign-in").

Every password check in the portal (the sign-in page, the Django admin's and
``POST /api/v1/auth/token/``) goes through ``django.contrib.auth.authenticate`` with the
request, and so through django-axes (``axes.backends.AxesStandaloneBackend`` is the first
backend): failures are counted per account and per client address, and a locked-out client
is refused before the password hasher runs.

- ``address``: the client address (``X-Forwarded-For`` only behind ``TRUSTED_PROXIES``).
- ``lockout``: how long a lockout lasts, the answer a locked-out client gets (page or JSON,
  429 with ``Retry-After``), the audit rows of lockouts and of unlocks.
- ``admin``: the failed attempts in the Django admin, with an audited "Unlock" action.
"""

from .address import client_ip

__all__ = ["client_ip"]
