"""django-axes' database handler with two limits: per account and per client address.

axes compares the larger of the two counts (the account's failures, the address's) with
one ``AXES_FAILURE_LIMIT``. A lab behind one NAT address was then locked out by anyone's
ten typos (#24, finding 10). Here the account keeps ``SIGNIN_FAILURE_LIMIT`` (10: guessing
one account's password stays bounded whatever the addresses) and the address gets its own
``SIGNIN_ADDRESS_FAILURE_LIMIT`` (100: a flood from one address still stops, an office
does not). ``get_failures`` answers in the account limit's terms, so every place axes
decides (before the hasher, after a failure) applies both limits.
"""

from __future__ import annotations

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_failure_limit
from django.conf import settings
from django.db.models import Sum


def counts(handler, request, credentials) -> tuple[int, int]:
    """(the account's failures, the address's) within the cool-off."""
    account, address = (
        attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
        for attempts in handler.get_user_attempts(request, credentials)
    )  # AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"], in that order
    return account, address


def limits(request, credentials) -> tuple[int, int]:
    return get_failure_limit(request, credentials), settings.SIGNIN_ADDRESS_FAILURE_LIMIT


class PortalAxesHandler(AxesDatabaseHandler):
    def get_failures(self, request, credentials=None) -> int:
        account, address = counts(self, request, credentials)
        account_limit, address_limit = limits(request, credentials)
        if address >= address_limit:
            return max(account, account_limit)  # locked by the address
        return account
