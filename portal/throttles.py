"""Rate limit on members' writes to the REST API (issue #11, section 5).

Every POST, PUT, PATCH and DELETE of a signed-in non-admin counts against one budget per
user, ``MEMBER_WRITE_RATE`` (default 60/min; DRF's ``"N/s|min|hour|day"``). Over it the
answer is 429 with ``Retry-After`` (seconds) and a JSON ``detail``. Reads, admins and
anonymous requests (the token endpoint has its own throttle, agents their own path) are
not counted, nor are writes refused by their permission (403: DRF checks permissions before
throttles, and a refused request does no work), nor views that set
``exempt_from_write_limit`` (revoking one's own API token: a member who hit the limit must
still be able to revoke a leaked token). Counters live in the Django cache (Redis),
so all web workers share them.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import UserRateThrottle


class MemberWriteThrottle(UserRateThrottle):
    scope = "member_writes"

    def get_rate(self) -> str | None:
        # Read per request (not at import) so that settings changes take effect.
        return getattr(settings, "MEMBER_WRITE_RATE", "60/min") or None

    def allow_request(self, request, view) -> bool:
        user = request.user
        if request.method in SAFE_METHODS or not user.is_authenticated or user.is_staff:
            return True
        if getattr(view, "exempt_from_write_limit", False):  # e.g. revoking a leaked token
            return True
        self.rate = self.get_rate()
        if self.rate is None:  # MEMBER_WRITE_RATE="" turns the limit off
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)
