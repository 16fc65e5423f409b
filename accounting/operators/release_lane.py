"""Cuebot's releases answered ahead of Django's request handling (issue 35).

The release endpoints carry nearly all of this service's traffic: Cuebot posts every proc it
gives back. Through Django and django-ninja a single release paid about as much again around
it as the release itself: the middleware, the request and response objects, URL resolution,
ninja's operation (docs/benchmarks.md, "The release over HTTP"). ReleaseLane wraps the WSGI
application and answers a release request itself when it is one the API would take as it
stands, with the API's answer and the headers its middleware would add; every other request
goes to Django untouched, and so do the refusals (401, 403, 413, 415, 422, a redirect to
HTTPS, a disallowed host), which Django answers as it always has.

The lane re-states what Django does to a release request under one stack: the middleware of
REVIEWED_MIDDLEWARE in that order, no ATOMIC_REQUESTS, and the settings of REVIEWED_SETTINGS
(issue 43). A project whose stack is anything else (a middleware appended, removed or moved, a
setting away from its reviewed value) would have its releases answered without what it added:
so the lane steps aside when it is built, every request goes to Django, and the system check
accounting.W002 (`check --deploy`) and a warning in the worker's log say why (off_because).

While it is on, a request is taken here when every one of these holds, checked in this order,
the first five without a database read:
- it is a POST to the single or the batch release path, as the URLconf reverses them;
- its host is one ALLOWED_HOSTS allows, and no redirect to HTTPS awaits it
  (SECURE_SSL_REDIRECT: an HTTPS request only);
- it carries a bearer token (the scheme as django-ninja reads it);
- the single release's proc id is ASCII, without `/` or NUL (the API's path parameter);
- a batch says `Content-Type: application/json` (with any parameters), its length is within
  DATA_UPLOAD_MAX_MEMORY_SIZE, and its body is what the API's own model (UnbookBatchIn)
  accepts; a body read and then refused is handed to Django to read again;
- the token is valid and holds accounting.release_proc (the API's check and its cache:
  no round trip while cached).
The release is then the endpoint's own (accounting.operators.release_api released_one and
released_many), rendered as the API renders its answers, between Django's request_started and
request_finished signals, so the database connection is checked and closed as for any request
(close_old_connections). An observer's refusal (ACCOUNTING_WRITES off: 403, raised by the
release before its first statement), a release cut off from PostgreSQL (503 with Retry-After,
accounting.operators.release_api) and an unexpected error (logged, 500) are answered as the API's
handlers answer them (infra.api.error_answer). Like Django's SecurityMiddleware, the lane
reads its settings once, when it is built.

tests/accounting/operators/test_api_release.py runs the release endpoints' tests through
Django and through the lane, and tests/accounting/operators/test_release_lane.py holds the
lane's answers, headers included, equal to Django's, each refusal to Django's, and the lane
stepping aside for a stack it was not reviewed against.
"""

import logging
from collections.abc import Callable, Iterable
from functools import lru_cache
from http import HTTPStatus
from io import BytesIO
from typing import Any

from django.conf import settings
from django.core.signals import request_finished, request_started
from django.db import connections
from django.http.request import split_domain_port, validate_host
from django.urls import reverse
from django.utils.http import parse_header_parameters
from ninja.errors import HttpError

from accounting.operators.auth import token_allows
from accounting.operators.release_api import UnbookBatchIn, released_many, released_one
from infra.api import INTERNAL_ERROR, api, error_answer, log_unexpected, parsed_json, rendered
from infra.api_types import bearer_token
from infra.permissions import RELEASE_PROCS
from infra.writes import WritesOff

logger = logging.getLogger(__name__)

WsgiApp = Callable[[dict, Callable], Iterable[bytes]]

# What the lane was reviewed against: Django's answer to a release request under this middleware,
# in this order, is what the lane gives (the browser middleware skips a token request; the rest
# add the headers _middleware_headers re-states, or act on requests the lane hands over).
REVIEWED_MIDDLEWARE = (
    "infra.api.JsonErrorsUnderApi",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "infra.browser_middleware.BrowserSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "infra.browser_middleware.BrowserAuthenticationMiddleware",
    "infra.browser_middleware.BrowserMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
)
# Every setting the lane reads, each with what it was reviewed at: REPEATED where the lane repeats
# Django's own reading of it for whatever value it has (read when the lane is built), else the one
# value the lane re-states (what CommonMiddleware does with any other, the lane does not repeat).
# Beside them, ATOMIC_REQUESTS off on every database (_atomic_requests).
REPEATED = "repeated for any value"
REVIEWED_SETTINGS: dict[str, object] = {
    "ALLOWED_HOSTS": REPEATED,
    "DEBUG": REPEATED,  # for ALLOWED_HOSTS's default only
    "DATA_UPLOAD_MAX_MEMORY_SIZE": REPEATED,
    "SECURE_SSL_REDIRECT": REPEATED,
    "SECURE_PROXY_SSL_HEADER": REPEATED,
    "USE_X_FORWARDED_HOST": REPEATED,
    "X_FRAME_OPTIONS": REPEATED,
    "SECURE_CONTENT_TYPE_NOSNIFF": REPEATED,
    "SECURE_REFERRER_POLICY": REPEATED,
    "SECURE_CROSS_ORIGIN_OPENER_POLICY": REPEATED,
    "SECURE_HSTS_SECONDS": REPEATED,
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": REPEATED,
    "SECURE_HSTS_PRELOAD": REPEATED,
    "DISALLOWED_USER_AGENTS": [],
    "PREPEND_WWW": False,
}


def _middleware_reviewed() -> str | None:
    current = list(settings.MIDDLEWARE)
    if current == list(REVIEWED_MIDDLEWARE):
        return None
    added = [name for name in current if name not in REVIEWED_MIDDLEWARE]
    missing = [name for name in REVIEWED_MIDDLEWARE if name not in current]
    changes = []
    if added:
        changes.append(f"adds {', '.join(added)}")
    if missing:
        changes.append(f"lacks {', '.join(missing)}")
    return f"MIDDLEWARE is not the list the lane re-states: {'; '.join(changes) or 'its order differs'}"


def _atomic_requests() -> str | None:
    # Read where Django's handler reads it (BaseHandler.make_view_atomic), per database.
    atomic = sorted(alias for alias, database in connections.settings.items() if database.get("ATOMIC_REQUESTS"))
    if not atomic:
        return None
    return (
        f"ATOMIC_REQUESTS is on for {', '.join(atomic)}: Django runs each view in a transaction of its own, "
        "which the lane would not"
    )


def _settings_reviewed() -> list[str]:
    return [
        f"{name} is {getattr(settings, name)!r}, not {value!r}"
        for name, value in REVIEWED_SETTINGS.items()
        if value is not REPEATED and getattr(settings, name) != value
    ]


def off_because() -> list[str]:
    """Why the lane steps aside, one reason a line (the check accounting.W002 and the worker's log
    give them); none while the project's stack is the one the lane was reviewed against. A new
    reason to leave every release to Django is one more entry here."""
    return [
        reason
        for reason in (
            _middleware_reviewed(),
            _atomic_requests(),
            *_settings_reviewed(),
        )
        if reason
    ]


@lru_cache(maxsize=64)
def _media_type(content_type: str) -> str:
    """HttpRequest.content_type, of a Content-Type header (the API's parser reads the body's bytes
    whatever its charset says)."""
    return parse_header_parameters(content_type)[0]


class _Answer(list):
    """The answer's body; its close(), which the server calls once the body is sent, ends the
    request as closing a Django response does."""

    def __init__(self, body: bytes, *, handler_class: type) -> None:
        super().__init__((body,))
        self.handler_class = handler_class

    def close(self) -> None:
        request_finished.send(sender=self.handler_class)


class ReleaseLane:
    """WSGI middleware over Django's WSGIHandler: the release endpoints' common case served here."""

    def __init__(self, django_app: WsgiApp) -> None:
        self.django_app = django_app
        reasons = off_because()
        self.taking = not reasons
        if reasons:
            logger.warning("the release lane is off, Django answers every release: %s", "; ".join(reasons))
        self.handler_class = type(django_app)
        self.batch_path = reverse("api:unbook_many")
        self.single_prefix, _, self.single_suffix = reverse("api:unbook_one", kwargs={"proc_id": "PROC"}).partition(
            "PROC"
        )
        self.shortest_single = len(self.single_prefix) + len(self.single_suffix) + 1
        self.max_body = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        self.https_only = settings.SECURE_SSL_REDIRECT
        self.proxy_ssl_header = settings.SECURE_PROXY_SSL_HEADER
        self.forwarded_host = settings.USE_X_FORWARDED_HOST
        self.allowed_hosts = settings.ALLOWED_HOSTS
        if settings.DEBUG and not self.allowed_hosts:  # as HttpRequest.get_host
            self.allowed_hosts = [".localhost", "127.0.0.1", "[::1]"]
        self.content_type = api.get_content_type()
        self.frame_headers, self.plain_headers, self.secure_headers = self._middleware_headers()

    @staticmethod
    def _middleware_headers() -> tuple[list[tuple[str, str]], ...]:
        """What the middleware adds to an API answer, in the order Django's answer has them:
        XFrameOptionsMiddleware's before CommonMiddleware's Content-Length; after it
        SecurityMiddleware's, over HTTP and over HTTPS (HSTS, over HTTPS only)."""
        frame = [("X-Frame-Options", getattr(settings, "X_FRAME_OPTIONS", "DENY").upper())]
        security = []
        if settings.SECURE_CONTENT_TYPE_NOSNIFF:
            security.append(("X-Content-Type-Options", "nosniff"))
        policy = settings.SECURE_REFERRER_POLICY
        if policy:
            values = [v.strip() for v in policy.split(",")] if isinstance(policy, str) else policy
            security.append(("Referrer-Policy", ",".join(values)))
        if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
            security.append(("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
        hsts = []
        if settings.SECURE_HSTS_SECONDS:
            value = f"max-age={settings.SECURE_HSTS_SECONDS}"
            value += "; includeSubDomains" if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS else ""
            value += "; preload" if settings.SECURE_HSTS_PRELOAD else ""
            hsts = [("Strict-Transport-Security", value)]
        return frame, security, hsts + security

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if self.taking and environ.get("REQUEST_METHOD") == "POST":
            path = environ.get("PATH_INFO", "")
            if path == self.batch_path:
                return self._batch(environ, start_response)
            if (
                len(path) >= self.shortest_single
                and path.startswith(self.single_prefix)
                and path.endswith(self.single_suffix)
            ):
                return self._single(environ, start_response, path[len(self.single_prefix) : -len(self.single_suffix)])
        return self.django_app(environ, start_response)

    def _single(self, environ: dict, start_response: Callable, proc_id: str) -> Iterable[bytes]:
        token = self._token(environ)
        if token is None or not proc_id.isascii() or "/" in proc_id or "\x00" in proc_id:
            return self.django_app(environ, start_response)
        return self._serve(environ, start_response, token, lambda: released_one(proc_id=proc_id))

    def _batch(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        token = self._token(environ)
        length = environ.get("CONTENT_LENGTH", "")
        if (
            token is None
            or _media_type(environ.get("CONTENT_TYPE", "")) != "application/json"
            or not (length.isascii() and length.isdigit())
            or (self.max_body is not None and int(length) > self.max_body)
        ):
            return self.django_app(environ, start_response)
        body = environ["wsgi.input"].read(int(length))
        try:
            payload = UnbookBatchIn.model_validate(parsed_json(body))
        except (ValueError, RecursionError):  # malformed or refused (pydantic's ValidationError is a ValueError)
            environ["wsgi.input"] = BytesIO(body)
            return self.django_app(environ, start_response)
        return self._serve(environ, start_response, token, lambda: (200, released_many(proc_ids=payload.proc_ids)))

    def _token(self, environ: dict) -> str | None:
        """The bearer token of a request the lane may take (see the module's list), else None."""
        token = bearer_token(environ.get("HTTP_AUTHORIZATION"))
        if not token:
            return None
        if self.https_only and not self._secure(environ):
            return None
        host = (self.forwarded_host and environ.get("HTTP_X_FORWARDED_HOST")) or environ.get("HTTP_HOST")
        if not host:
            return None
        domain, _ = split_domain_port(host)
        return token if domain and validate_host(domain, self.allowed_hosts) else None

    def _secure(self, environ: dict) -> bool:
        """HttpRequest.is_secure, on the environ."""
        if self.proxy_ssl_header:
            header, secure_value = self.proxy_ssl_header
            value = environ.get(header)
            if value is not None:
                return value.split(",", 1)[0].strip() == secure_value
        return environ.get("wsgi.url_scheme") == "https"

    def _serve(
        self, environ: dict, start_response: Callable, token: str, release: Callable[[], tuple[int, Any]]
    ) -> Iterable[bytes]:
        request_started.send(sender=self.handler_class, environ=environ)
        added: list[tuple[str, str]] = []  # the headers an error answer adds after Content-Type
        try:
            if not token_allows(raw=token, permission=RELEASE_PROCS):
                request_finished.send(sender=self.handler_class)
                return self.django_app(environ, start_response)
            status, answer = release()
        except (HttpError, WritesOff) as error:  # an observer's refusal, a release cut off from PostgreSQL
            status, answer, added = error_answer(error)
        except Exception as error:  # noqa: BLE001 - answered as the API's handler answers it
            log_unexpected(method="POST", path=environ.get("PATH_INFO", ""), error=error)
            status, answer = 500, {"detail": INTERNAL_ERROR}
        body = rendered(answer)
        headers = [
            ("Content-Type", self.content_type),
            *added,
            *self.frame_headers,
            ("Content-Length", str(len(body))),
        ]
        headers += self.secure_headers if self._secure(environ) else self.plain_headers
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return _Answer(body, handler_class=self.handler_class)
