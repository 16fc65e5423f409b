"""The ground floor of the service: what every package imports and nothing of the project's own.

Settings parsing helpers, the era, database and Redis plumbing, metrics, the API's shapes and
middleware, start-up checks. It imports only Django and libraries; accounting, shows,
settings and the roof (cuebot_acct: URLs, WSGI/ASGI, the task cluster) import it."""

# The service's version, its one source: the build reads it (pyproject.toml), and so do
# `cuebot-acct --version`, /healthz, the cuebot_acct_build_info gauge, the admin's footer and each
# process's accounting.Instance record. CHANGELOG.md says what each version changed.
__version__ = "1.0.0"
