"""Bearer-token authentication for the API's mutating endpoints, each needing one permission."""
import secrets

from django.contrib.auth.models import Permission
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


def grant_permissions(*, user, permissions: list[str]) -> None:
    """Give `user` these accounting.permissions names ("app_label.codename") directly."""
    if any(not name.startswith("accounting.") for name in permissions):
        raise ValueError(f"not accounting permissions: {permissions}")
    codenames = {name.removeprefix("accounting.") for name in permissions}
    found = list(Permission.objects.filter(content_type__app_label="accounting", codename__in=codenames))
    missing = codenames - {p.codename for p in found}
    if missing:
        raise ValueError(f"unknown permissions: {', '.join(sorted(missing))}")
    user.user_permissions.add(*found)


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


class MissingPermission(HttpError):
    """A valid token whose user lacks the endpoint's permission: 403 naming it."""

    def __init__(self, permission: str) -> None:
        super().__init__(403, f"this token's user lacks the permission {permission}")
        self.permission = permission


class BearerToken(HttpBearer):
    """A valid token (401 otherwise) of a user who holds `permission` (403 otherwise).

    The permission is one of accounting.permissions, granted to users or groups in the
    admin like any Django permission (a superuser holds them all).
    """

    def __init__(self, permission: str) -> None:
        super().__init__()
        self.permission = permission

    def authenticate(self, request: HttpRequest, token: str):
        user = user_for_token(raw=token)
        if user is None:
            return None
        if not user.has_perm(self.permission):
            raise MissingPermission(self.permission)
        request.user = user
        return user
