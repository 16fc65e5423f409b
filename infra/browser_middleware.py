"""Django's session, authentication and message middleware, skipped for an API request that
carries a bearer token (issue 35): the token alone authenticates it, and it never reads the
session or adds a message, so the three would only build lazy objects on every release."""

from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest
from django.utils.deprecation import MiddlewareMixin

from infra.api_types import bearer_token


def token_request(request: HttpRequest) -> bool:
    """Under /api/ with an `Authorization: Bearer ...` header, read by the API's one parser
    (infra.api_types.bearer_token, django-ninja's reading). Whether the token is valid is
    the endpoint's question: a wrong one is answered 401 there, with no session either way."""
    return request.path_info.startswith("/api/") and bearer_token(request.META.get("HTTP_AUTHORIZATION")) is not None


# Skipping them changes no status, body or header: SessionMiddleware sets a cookie and `Vary:
# Cookie` only when the session was read, MessageMiddleware only when a message was added. A
# request without a bearer header (the admin, a browser on /api/v1/docs) goes through all three.
# CsrfViewMiddleware and django-axes' middleware stay as they are, by name: `check --deploy`
# (security.W003) and axes' system check look for them so.
class _NotForTokens(MiddlewareMixin):
    """The wrapped middleware's whole work, but for token requests (see the module). A mixin of
    Django's middleware base, which the three wrapped classes share, so it precedes them in the MRO."""

    def __call__(self, request: HttpRequest):
        if token_request(request):
            return self.get_response(request)  # a coroutine under ASGI, awaited by the caller
        return super().__call__(request)


class BrowserSessionMiddleware(_NotForTokens, SessionMiddleware):
    pass


class BrowserAuthenticationMiddleware(_NotForTokens, AuthenticationMiddleware):
    pass


class BrowserMessageMiddleware(_NotForTokens, MessageMiddleware):
    pass
