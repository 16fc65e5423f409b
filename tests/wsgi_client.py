"""A test client that sends its requests as a WSGI server does, through the application
cuebot_acct.wsgi serves: the release lane (accounting.operators.release_lane) over Django's
WSGIHandler. Django's own test client calls the handler's get_response and never passes the
lane; this one speaks WSGI, so the API's tests run through both (the `api_client` fixture).
"""

import json
from collections.abc import Callable

from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.http import HttpResponse
from django.test import RequestFactory

from accounting.operators.release_lane import ReleaseLane


def wsgi_call(app: Callable, environ: dict) -> HttpResponse:
    """The app's answer to `environ`, its body closed as a server closes it. As Django's test client,
    the request signals do not close the test's database connection (it holds the test's transaction)."""
    seen: dict = {}

    def start_response(status: str, headers: list, exc_info=None) -> None:
        seen["status"], seen["headers"] = status, headers

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        body = app(environ, start_response)
        try:
            content = b"".join(body)
        finally:
            if hasattr(body, "close"):
                body.close()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    response = HttpResponse(content, status=int(seen["status"].split(" ", 1)[0]), headers=dict(seen["headers"]))
    response.header_list = seen["headers"]  # as sent, in order and with repeats
    response.json = lambda: json.loads(response.content)  # as Django's test client adds it
    return response


class LaneClient:
    """The methods of django.test.Client the API's tests use, sent through ReleaseLane(WSGIHandler()).

    Every request carries a Host header, as every HTTP/1.1 request does (the lane hands one without
    it to Django)."""

    def __init__(self) -> None:
        self.app = ReleaseLane(WSGIHandler())
        self.factory = RequestFactory()

    def generic(
        self, method: str, path: str, data="", content_type="application/octet-stream", *, headers=None, **extra
    ):
        headers = {"Host": "testserver", **(headers or {})}
        request = self.factory.generic(method, path, data, content_type, headers=headers, **extra)
        return wsgi_call(self.app, request.environ)

    def post(self, path: str, data=None, content_type="application/json", *, headers=None, **extra):
        data = "" if data is None else data if isinstance(data, str | bytes) else json.dumps(data)
        return self.generic("POST", path, data, content_type, headers=headers, **extra)

    def get(self, path: str, *, headers=None, **extra):
        return self.generic("GET", path, headers=headers, **extra)

    def delete(self, path: str, data="", content_type="application/octet-stream", *, headers=None, **extra):
        return self.generic("DELETE", path, data, content_type, headers=headers, **extra)

    def put(self, path: str, data="", content_type="application/octet-stream", *, headers=None, **extra):
        return self.generic("PUT", path, data, content_type, headers=headers, **extra)

    def patch(self, path: str, data="", content_type="application/octet-stream", *, headers=None, **extra):
        return self.generic("PATCH", path, data, content_type, headers=headers, **extra)
