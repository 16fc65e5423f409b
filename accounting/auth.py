"""Bearer-token authentication for the API's mutating endpoints."""
import copy
import secrets
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from ninja.errors import HttpError
from ninja.security import HttpBearer

from accounting.models import ApiToken, hash_token


def issue_token(*, user, name: str = "") -> str:
    """Create a token for `user` and return its raw value; only its hash is kept."""
    raw = secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, name=name, key_hash=hash_token(raw), prefix=raw[:8])
    return raw


# A valid token's user, kept in the process for AUTH_TOKEN_CACHE_SECONDS: a request pays no
# database read while it is fresh, and a revoked token (or a deactivated user) stops working
# in every process at most that long after the change. An unknown or revoked token is never
# kept. last_used_at is written when the token is read from the database and is more than
# LAST_USED_RESOLUTION old: at most one write per token, process and resolution period.
LAST_USED_RESOLUTION = timedelta(minutes=1)
_clock = time.monotonic
_valid: dict[str, tuple[object, float]] = {}
_valid_lock = threading.Lock()


def user_for_token(*, raw: str):
    key_hash = hash_token(raw)
    with _valid_lock:
        user, fresh_until = _valid.get(key_hash, (None, 0.0))
    if user is not None and _clock() < fresh_until:
        return copy.copy(user)  # per request: permission caches must not cross requests
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=key_hash, revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        with _valid_lock:
            _valid.pop(key_hash, None)
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    with _valid_lock:
        _valid[key_hash] = (token.user, _clock() + settings.AUTH_TOKEN_CACHE_SECONDS)
    return copy.copy(token.user)


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):
        user = user_for_token(raw=token)
        if user is not None:
            request.user = user
        return user



class StaffBearerToken(BearerToken):
    """A valid token of a staff user: 401 without one, 403 for a non-staff user's token."""

    def authenticate(self, request: HttpRequest, token: str):
        user = super().authenticate(request, token)
        if user is not None and not user.is_staff:
            raise HttpError(403, "this endpoint needs a staff user's token")
        return user
