"""Bearer-token authentication for the API's mutating endpoints."""
import secrets

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


def user_for_token(*, raw: str):
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=hash_token(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user


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
