"""Bearer-token authentication for the API's mutating endpoints, each needing one permission."""

import copy
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Permission
from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from ninja.security import HttpBearer

from accounting.models import ApiToken, hash_token
from infra.api_types import MissingPermission, bearer_token


def issue_token(*, user, name: str = "") -> str:
    """Create a token for `user` and return its raw value; only its hash is kept."""
    raw = secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, name=name, key_hash=hash_token(raw), prefix=raw[:8])
    return raw


def grant_permissions(*, user, permissions: list[str]) -> None:
    """Give `user` these infra.permissions names ("app_label.codename") directly."""
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


@dataclass(frozen=True)
class _Trusted:
    """A valid token's user as read, and each permission asked of it, decided once by Django's
    has_perm (every authentication backend, in turn) and kept with the user: the release path asks
    the same permission at every request (issue 35: the backends' walk cost more than the cache)."""

    user: Any
    fresh_until: float
    decisions: dict[str, bool] = field(default_factory=dict)

    def allows(self, permission: str) -> bool:
        allowed = self.decisions.get(permission)
        if allowed is None:  # two threads may both decide it: the same answer, one dict write each
            allowed = self.decisions[permission] = self.user.has_perm(permission)
        return allowed


_valid: dict[str, _Trusted] = {}
_valid_lock = threading.Lock()


def _trusted(*, raw: str) -> _Trusted | None:
    key_hash = hash_token(raw)
    with _valid_lock:
        trusted = _valid.get(key_hash)
    if trusted is not None and _clock() < trusted.fresh_until:
        return trusted
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
    trusted = _Trusted(user=token.user, fresh_until=_clock() + settings.AUTH_TOKEN_CACHE_SECONDS)
    with _valid_lock:
        _valid[key_hash] = trusted
    return trusted


def token_allows(*, raw: str, permission: str) -> bool:
    """Whether the token is valid and its user holds `permission`: the check of BearerToken, without
    its answers (accounting.operators.release_lane hands anything else to the API, which gives them)."""
    trusted = _trusted(raw=raw)
    return trusted is not None and trusted.allows(permission)


class BearerToken(HttpBearer):
    """A valid token (401 otherwise) of a user who holds `permission` (403 otherwise).

    The permission is one of infra.permissions, granted to users or groups in the
    admin like any Django permission (a superuser holds them all).
    """

    def __init__(self, permission: str) -> None:
        super().__init__()
        self.permission = permission

    def __call__(self, request: HttpRequest):
        # django-ninja's HttpBearer.__call__, the header read from the WSGI environ: request.headers
        # builds a case-insensitive copy of every header at its first use (14 µs here), and nothing
        # else reads it on a token request (issue 35). The scheme and the token are read as ninja reads
        # them; ninja's log of an unexpected header under DEBUG, which writes the credential, is left out.
        token = bearer_token(request.META.get("HTTP_AUTHORIZATION"))
        return None if token is None else self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str):
        trusted = _trusted(raw=token)
        if trusted is None:
            return None
        if not trusted.allows(self.permission):
            raise MissingPermission(self.permission)
        # The request's own copy of the user, made only if something reads request.user (as Django's
        # AuthenticationMiddleware does it): the API's endpoints do not, and a copy of a model
        # instance costs more than the rest of this check.
        # django-stubs type request.user as a User, which the lazy object stands for.
        request.user = SimpleLazyObject(partial(copy.copy, trusted.user))  # type: ignore[assignment]
        return token  # request.auth: what authenticated it, as django-ninja's own examples return
