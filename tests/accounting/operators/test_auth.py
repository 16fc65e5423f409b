"""Token authentication without a database read or write per request (accounting.operators.auth)."""

import copy
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import accounting.operators.auth
from accounting.models import ApiToken
from accounting.operators.auth import (
    LAST_USED_RESOLUTION,
    grant_permissions,
    issue_token,
)
from infra.permissions import CHANGE_LIMITS, RELEASE_PROCS


def user_for_token(*, raw: str):
    """The token's user as BearerToken gives each request one: its own copy (the permission sets
    are shared, never mutated); None for a token unknown, revoked or of an inactive user."""
    trusted = accounting.operators.auth._trusted(raw=raw)
    return None if trusted is None else copy.copy(trusted.user)


@pytest.fixture
def clock(monkeypatch):
    """The cache's clock, moved by the test."""
    now = [1000.0]
    monkeypatch.setattr(accounting.operators.auth, "_clock", lambda: now[0])
    return now


@pytest.fixture
def raw(db) -> str:
    return issue_token(user=get_user_model().objects.create_user(username="releaser"))


def test_a_fresh_token_costs_no_query(raw, clock):
    assert user_for_token(raw=raw).username == "releaser"
    with CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            assert user_for_token(raw=raw).username == "releaser"
    assert queries.captured_queries == []


def test_each_request_gets_its_own_user_object(raw, clock):
    assert user_for_token(raw=raw) is not user_for_token(raw=raw)


def test_a_revocation_takes_effect_within_the_cache_period(raw, clock, settings):
    assert user_for_token(raw=raw) is not None
    ApiToken.objects.update(revoked_at=timezone.now())
    clock[0] += settings.AUTH_TOKEN_CACHE_SECONDS - 0.001
    assert user_for_token(raw=raw) is not None  # still trusted: the documented bound
    clock[0] += 0.001
    assert user_for_token(raw=raw) is None
    clock[0] -= 5  # and never trusted again from the old entry
    assert user_for_token(raw=raw) is None


def test_a_deactivated_user_is_refused_within_the_cache_period(raw, clock, settings):
    assert user_for_token(raw=raw) is not None
    get_user_model().objects.update(is_active=False)
    clock[0] += settings.AUTH_TOKEN_CACHE_SECONDS
    assert user_for_token(raw=raw) is None


def test_unknown_tokens_are_never_kept(db, clock):
    with CaptureQueriesContext(connection) as queries:
        assert user_for_token(raw="not-a-token") is None
        assert user_for_token(raw="not-a-token") is None
    assert len(queries.captured_queries) == 2


def test_last_used_is_written_at_most_once_per_resolution_period(raw, clock, settings):
    def writes() -> int:
        return sum(1 for q in queries.captured_queries if q["sql"].startswith("UPDATE"))

    with CaptureQueriesContext(connection) as queries:
        user_for_token(raw=raw)
    assert writes() == 1
    first = ApiToken.objects.get().last_used_at
    clock[0] += settings.AUTH_TOKEN_CACHE_SECONDS  # read again from the database, but recently written
    with CaptureQueriesContext(connection) as queries:
        user_for_token(raw=raw)
    assert writes() == 0
    ApiToken.objects.update(last_used_at=first - LAST_USED_RESOLUTION)  # a minute has passed
    clock[0] += settings.AUTH_TOKEN_CACHE_SECONDS
    with CaptureQueriesContext(connection) as queries:
        user_for_token(raw=raw)
    assert writes() == 1
    assert ApiToken.objects.get().last_used_at - first < timedelta(seconds=60)


def test_a_fresh_tokens_permission_check_costs_no_query(raw, clock):
    grant_permissions(user=get_user_model().objects.get(username="releaser"), permissions=[RELEASE_PROCS])
    assert user_for_token(raw=raw).has_perm(RELEASE_PROCS)
    with CaptureQueriesContext(connection) as queries:
        user = user_for_token(raw=raw)
        assert user.has_perm(RELEASE_PROCS) and not user.has_perm(CHANGE_LIMITS)
    assert queries.captured_queries == []


def test_a_withdrawn_permission_takes_effect_within_the_cache_period(raw, clock, settings):
    releaser = get_user_model().objects.get(username="releaser")
    grant_permissions(user=releaser, permissions=[RELEASE_PROCS])
    assert user_for_token(raw=raw).has_perm(RELEASE_PROCS)
    releaser.user_permissions.clear()
    clock[0] += settings.AUTH_TOKEN_CACHE_SECONDS - 0.001
    assert user_for_token(raw=raw).has_perm(RELEASE_PROCS)  # the documented bound
    clock[0] += 0.001
    assert not user_for_token(raw=raw).has_perm(RELEASE_PROCS)


def test_a_fresh_tokens_permission_is_decided_once_per_cache_period(raw, clock, settings, monkeypatch):
    # Django's has_perm walks every authentication backend; the release path asks the same
    # permission at every request, so each permission is decided once per cache period.
    from django.contrib.auth.models import PermissionsMixin
    from django.test import RequestFactory

    from accounting.operators.auth import BearerToken

    grant_permissions(user=get_user_model().objects.get(username="releaser"), permissions=[RELEASE_PROCS])
    asked = []
    has_perm = PermissionsMixin.has_perm
    monkeypatch.setattr(
        PermissionsMixin, "has_perm", lambda user, perm, obj=None: asked.append(perm) or has_perm(user, perm, obj)
    )
    check = BearerToken(RELEASE_PROCS)
    for _ in range(3):
        request = RequestFactory().post("/api/v1/procs/unbook")
        assert check.authenticate(request, raw) == raw
    assert asked == [RELEASE_PROCS]
    assert request.user.username == "releaser"  # read when asked for, each request its own object
    clock[0] += settings.AUTH_TOKEN_CACHE_SECONDS
    check.authenticate(RequestFactory().post("/api/v1/procs/unbook"), raw)
    assert asked == [RELEASE_PROCS, RELEASE_PROCS]


def test_each_request_reads_its_own_user_object(raw, clock):
    from django.test import RequestFactory

    from accounting.operators.auth import BearerToken

    grant_permissions(user=get_user_model().objects.get(username="releaser"), permissions=[RELEASE_PROCS])
    first, second = RequestFactory().post("/"), RequestFactory().post("/")
    for request in (first, second):
        BearerToken(RELEASE_PROCS).authenticate(request, raw)
    first.user.first_name = "changed by one request"
    assert second.user.first_name == "" and user_for_token(raw=raw).first_name == ""


def test_the_header_is_read_as_django_ninja_reads_it_without_building_request_headers(raw, clock):
    from django.test import RequestFactory
    from ninja.security import HttpBearer

    from accounting.operators.auth import BearerToken

    grant_permissions(user=get_user_model().objects.get(username="releaser"), permissions=[RELEASE_PROCS])

    class NinjasReading(HttpBearer):
        def authenticate(self, request, token):
            return token

    for header in (f"Bearer {raw}", f"bearer {raw}", f"Bearer  {raw}", f"Basic {raw}", "Bearer", "", raw):
        ours, ninjas = RequestFactory().post("/", HTTP_AUTHORIZATION=header), RequestFactory().post("/")
        ninjas.META["HTTP_AUTHORIZATION"] = header
        expected = NinjasReading()(ninjas)
        assert BearerToken(RELEASE_PROCS)(ours) == (expected if expected == raw else None), header
        assert "headers" not in ours.__dict__  # request.headers was never built
