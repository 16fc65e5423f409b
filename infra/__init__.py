"""The ground floor of the service: what every package imports and nothing of the project's own.

Settings parsing helpers, the era, database and Redis plumbing, metrics, the API's shapes and
middleware, start-up checks. It imports only Django and libraries; accounting, shows,
settings and the roof (cuebot_acct: URLs, WSGI/ASGI, the task cluster) import it."""

# Reported by every running process in its accounting.Instance record.
__version__ = "0.1.0"
