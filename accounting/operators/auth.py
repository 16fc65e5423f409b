"""Bearer-token authentication for the API's mutating endpoints, each needing one permission."""

import copy
import secrets
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import Permission
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import HttpBearer

from accounting.models import ApiToken, hash_token
from cuebot_acct.api_types import MissingPermission


def issue_token(*, user, name: str = "") -> str:
    """Create a token for `user` and return its raw value; only its hash is kept."""
    raw = secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, name=name, key_hash=hash_token(raw), prefix=raw[:8])
    return raw


def grant_permissions(*, user, permissions: list[str]) -> None:
    """Give `user` these cuebot_acct.permissions names ("app_label.codename") directly."""
    if any(not name.startswith("accounting.") for name in permissions):
        raise ValueError(f"not accounting permissions: {permissions}")
    codenames = {name.removeprefix("accounting.") for name in permissions}
    found = list(Permission.objects.filter(content_type__app_label="accounting", codename__in=codenames))
    missing = codenames - {p.codename for p in found}
    if missing:
        raise ValueError(f"unknown permissions: {', '.join(sorted(missing))}")
    user.user_permissions.add(*found)


# A valid token's user, with its permissions, kept in the process for
# AUTH_TOKEN_CACHE_SECONDS: a request pays no database read while it is fresh, and a revoked
# token, a deactivated user or a withdrawn permission stops working in every process at most
# that long after the change. An unknown or revoked token is never kept. last_used_at is
# written when the token is read from the database and is more than LAST_USED_RESOLUTION
# old: at most one write per token, process and resolution period.
LAST_USED_RESOLUTION = timedelta(minutes=1)
_clock = time.monotonic
_valid: dict[str, tuple[object, float]] = {}
_valid_lock = threading.Lock()


def user_for_token(*, raw: str):
    key_hash = hash_token(raw)
    with _valid_lock:
        user, fresh_until = _valid.get(key_hash, (None, 0.0))
    if user is not None and _clock() < fresh_until:
        return copy.copy(user)  # each request its own object; the permission sets are shared, never mutated
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
    token.user.get_all_permissions()  # fills the user's permission caches, kept with it
    with _valid_lock:
        _valid[key_hash] = (token.user, _clock() + settings.AUTH_TOKEN_CACHE_SECONDS)
    return copy.copy(token.user)


class BearerToken(HttpBearer):
    """A valid token (401 otherwise) of a user who holds `permission` (403 otherwise).

    The permission is one of cuebot_acct.permissions, granted to users or groups in the
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
