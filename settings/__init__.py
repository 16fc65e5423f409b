"""cuebot-acct settings: every value comes from the environment (or a .env file).

The README lists each variable, its default and the Cuebot property it replaces.
"""

import os
from datetime import timedelta
from pathlib import Path

import environ

from infra import era as eras
from infra.bad_setting import BadSetting
from infra.redis_factory import check_redis_url, django_cache
from infra.writes import WRITES_WORDS

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

# The development key lets commands, the suite and DEBUG run without configuration; a process
# that serves (gunicorn, the task cluster) refuses it while DEBUG is off (infra.startup).
DEVELOPMENT_SECRET_KEY = "cuebot-acct-insecure-development-key"
# An empty value counts as unset (refused in one line, not Django's "must not be empty" traceback).
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="") or DEVELOPMENT_SECRET_KEY
DEBUG = env.bool("DJANGO_DEBUG", default=False)
# Served over HTTPS (TLS ended by a proxy that sets X-Forwarded-Proto): secure cookies, a
# redirect from plain HTTP (but for /metrics and /healthz, scraped inside), HSTS.
HTTPS = env.bool("DJANGO_HTTPS", default=False)
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^metrics$", r"^healthz$"]
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=31536000)
    # The preload directive only asks; a domain reaches browsers' list when its owner submits it.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("DJANGO_HSTS_PRELOAD", default=True)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_q",
    "ninja",  # /api/v1/docs then uses Swagger UI from ninja's static files, not a CDN
    "shows",
    "accounting",
    "simulator",  # simulate_farm and seed_demo_farm: the simulated farm, apart from the service
    "axes",  # admin login throttling
]

MIDDLEWARE = [
    "infra.api.JsonErrorsUnderApi",  # outermost: every error under /api/ leaves as JSON
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Django's session, user and message middleware, each skipped for an /api/ request
    # carrying a bearer token, which uses none of them (infra.browser_middleware).
    "infra.browser_middleware.BrowserSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Django's own, by name (check --deploy's security.W003 wants it so); it does nothing for
    # the API's endpoints, which django-ninja makes CSRF-exempt, beyond reading a cookie.
    "django.middleware.csrf.CsrfViewMiddleware",
    "infra.browser_middleware.BrowserAuthenticationMiddleware",
    "infra.browser_middleware.BrowserMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # answers a locked-out login with 429
    # A failed read of Cuebot's database apart (CUEBOT_DATABASE_URL) in one line, 503; nothing else.
    "infra.cuebot_database.CuebotReadErrors",
]

# Admin logins are throttled (django-axes): after AXES_FAILURE_LIMIT wrong passwords for one
# username from one address, that pair is locked out for AXES_COOLOFF_MINUTES, the right
# password included; a success resets the count. API tokens are not passwords and are not
# throttled here (a wrong token costs a hash lookup, answered 401).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # no banner at every start: a refused start stays one line

ROOT_URLCONF = "cuebot_acct.urls"
WSGI_APPLICATION = "cuebot_acct.wsgi.application"
ASGI_APPLICATION = "cuebot_acct.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Before the apps' templates: cuebot_acct/templates/admin/nav_sidebar.html adds the operator's pages.
        "DIRS": [BASE_DIR / "cuebot_acct" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "infra.writes.template_context",  # an observer's pages say so (admin/base_site.html)
                "infra.era.template_context",  # pages explain the era's sources only
                "infra.cuebot_database.template_context",  # "as of" a standby's replay, where behind
                "infra.version.template_context",  # the admin's footer names the version
            ],
        },
    },
]

DATABASE_URL = env.str("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/cuebot_acct")
DATABASES = {"default": env.db_url_config(DATABASE_URL)}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
# Django's backend, but the per-request health check costs no round trip (infra.postgresql).
DATABASES["default"]["ENGINE"] = "infra.postgresql"
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = 5
# psycopg's own default (Django passes None, which turns preparation off): the release
# path's server-binding cursor prepares its statements (accounting.release.transport); Django's
# client-binding cursors never prepare whatever this says.
DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 5

# Who owns Cuebot's tables (show, proc, the accounting tables...): "create" (demo, tests)
# lets the project's migration create them; "existing" attaches to a site's Cuebot
# database, where they are never created, altered or dropped (infra.db_router).
OPENCUE_TABLES = env.str("OPENCUE_TABLES", default="create")
if OPENCUE_TABLES not in ("create", "existing"):
    raise BadSetting(
        setting="OPENCUE_TABLES",
        problem=f"is {OPENCUE_TABLES!r}",
        accepted="'create' (the project creates Cuebot's tables) or 'existing' (a site's Cuebot database)",
    )
# A PostgreSQL schema for the project's own tables (Django's, django-q2's, tokens, the
# instance register), so that none of them sits among Cuebot's. Empty: the role's default.
OWN_TABLES_SCHEMA = env.str("OWN_TABLES_SCHEMA", default="")
# The schema that holds Cuebot's tables, searched after OWN_TABLES_SCHEMA.
CUEBOT_SCHEMA = env.str("CUEBOT_SCHEMA", default="public")
if OWN_TABLES_SCHEMA:
    for name, value in (("OWN_TABLES_SCHEMA", OWN_TABLES_SCHEMA), ("CUEBOT_SCHEMA", CUEBOT_SCHEMA)):
        if not value.isidentifier() or value != value.lower():
            raise BadSetting(
                setting=name, problem=f"is {value!r}", accepted="a lower-case SQL identifier (letters, digits, _)"
            )
    DATABASES["default"]["OPTIONS"]["options"] = f"-c search_path={OWN_TABLES_SCHEMA},{CUEBOT_SCHEMA}"
# Where Cuebot's tables are read (infra.cuebot_database): by default the service's own
# database, as above; a URL naming another database (a hot standby of Cuebot's, say) makes the
# alias `cuebot`, on the same backend, searching CUEBOT_SCHEMA alone. Only an observer may have it
# (accounting.E006): Cuebot's tables are written in the same transaction as the service's state.
CUEBOT_DATABASE_URL = env.str("CUEBOT_DATABASE_URL", default="") or DATABASE_URL
_cuebot = env.db_url_config(CUEBOT_DATABASE_URL)
CUEBOT_DATABASE_ALIAS = "default"  # derived: the alias infra.cuebot_database names
if tuple(_cuebot.get(key) for key in ("HOST", "PORT", "NAME")) != tuple(
    DATABASES["default"].get(key) for key in ("HOST", "PORT", "NAME")
):
    _cuebot_options = {key: value for key, value in DATABASES["default"]["OPTIONS"].items() if key != "options"}
    DATABASES["cuebot"] = {
        **DATABASES["default"],
        **_cuebot,
        "ENGINE": DATABASES["default"]["ENGINE"],
        "OPTIONS": {**_cuebot_options, **_cuebot.get("OPTIONS", {}), "options": f"-c search_path={CUEBOT_SCHEMA}"},
    }
    CUEBOT_DATABASE_ALIAS = "cuebot"
DATABASE_ROUTERS = ["infra.db_router.CuebotTablesRouter"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Which OpenCue scheduler the site runs (infra.era, docs/eras.md): maestro (OpenCue
# v1.34.20 and later: Cuebot owns the five accounting tables for every show), redis or notify
# (the two eras of OpenCue's main branch that were never released), or redis,notify while a
# site moves between those two. Deployments that set the two booleans of earlier versions keep
# working: redis -> ACCOUNTING_REDIS_ENABLED, notify -> ACCOUNTING_NOTIFY_ENABLED, both false ->
# maestro. With neither, a production process (DEBUG off) refuses to start: a wrong guess
# corrupts a site's counters. The demo (`make run`) and the suite run the design's Redis era.
_scheduler = env.str("ACCOUNTING_SCHEDULER", default="")
_flags = {
    name: env.bool(name) for name in ("ACCOUNTING_REDIS_ENABLED", "ACCOUNTING_NOTIFY_ENABLED") if name in os.environ
}
ACCOUNTING_SCHEDULER: str | None  # None: refused at start-up (below)
if _scheduler.strip():
    ACCOUNTING_SCHEDULER = eras.parse(value=_scheduler)
    _named = dict(zip(eras.OLD_SWITCHES, eras.named(ACCOUNTING_SCHEDULER).old_switches))
    for _name, _value in _flags.items():
        if _value != _named[_name]:
            raise BadSetting(
                setting=_name,
                problem=f"is {str(_value).lower()} but ACCOUNTING_SCHEDULER is {ACCOUNTING_SCHEDULER!r}",
                accepted="leave it unset (ACCOUNTING_SCHEDULER decides) or make the two agree",
            )
elif _flags or DEBUG:
    ACCOUNTING_SCHEDULER = eras.from_old_switches(
        redis=_flags.get("ACCOUNTING_REDIS_ENABLED", True), notify=_flags.get("ACCOUNTING_NOTIFY_ENABLED", False)
    )
else:
    # Refused once the settings are complete (a module built on these, like settings.test, may
    # still name it): accounting's AppConfig.ready(), which every process runs at start-up
    # (a manage.py line that only prints help or a version is let through: infra.startup).
    ACCOUNTING_SCHEDULER = None
_ERA = eras.named(ACCOUNTING_SCHEDULER or eras.MAESTRO)
# Whether this instance writes anything of Cuebot's (the release, repairs, limits, the toggle, the
# scheduled recompute) and the scheduler's Redis counters: off, it observes (drift, the guardrail,
# the admin's pages, /metrics) under a role that may only SELECT Cuebot's tables, and every write
# face refuses in one line (infra.writes, docs/attaching.md). Unset: off on a site's database,
# on where the project created Cuebot's tables itself (the demo, the suite).
_writes = env.str("ACCOUNTING_WRITES", default="")
if _writes.strip().lower() not in ("", *WRITES_WORDS):
    raise BadSetting(setting="ACCOUNTING_WRITES", problem=f"is {_writes!r}", accepted="on or off (true or false)")
ACCOUNTING_WRITES = WRITES_WORDS.get(_writes.strip().lower(), OPENCUE_TABLES == "create")
# Which Redis servers an instance uses follows its era. The Redis era's scheduler reads its
# counters in the accounting Redis. The Redis and NOTIFY eras read each release's show flag
# through the cache Redis, which pushes every change of it to every process
# (shows.flag_tracking), and keep their task broker there too. In the Maestro era a release
# reads no flag, so an instance needs no Redis at all: a URL left unset there means none, the
# cache is a table of the project's own in PostgreSQL and the task cluster's broker is django-q2's
# on the same database. A URL a site sets is used wherever its era has a use for it; an empty one
# counts as unset.
# The defaults: one local server, a database index for each role.
_LOCAL_REDIS = "redis://127.0.0.1:6379/{db}"
# No era named (refused at start-up, but for a command that only prints): every default stays.
_FLAG_ON_RELEASE_PATH = ACCOUNTING_SCHEDULER is None or not _ERA.cuebot_owns_every_show
# Replaces accounting.redis.host / accounting.redis.port: the Redis the scheduler reads.
ACCOUNTING_REDIS_URL = env.str("ACCOUNTING_REDIS_URL", default="") or (
    _LOCAL_REDIS.format(db=0) if _ERA.keeps_redis or ACCOUNTING_SCHEDULER is None else ""
)
# Seconds before a Redis call from the release path gives up. It is never retried.
ACCOUNTING_REDIS_TIMEOUT = env.float("ACCOUNTING_REDIS_TIMEOUT", default=2.0)
# After a release's Redis call timed out or could not connect, seconds during which this
# process's releases skip Redis at once (leaving it high) instead of waiting on it again.
ACCOUNTING_REDIS_BREAKER_SECONDS = env.float("ACCOUNTING_REDIS_BREAKER_SECONDS", default=2.0)
# How long an in-flight booking or release counts as booked if its holder never settles it.
ACCOUNTING_INFLIGHT_TTL_SECONDS = env.int("ACCOUNTING_INFLIGHT_TTL_SECONDS", default=60)
# Scheduled reseeds, for a deployment that runs without the Rust scheduler's own loops.
ACCOUNTING_RECONCILE_ENABLED = env.bool("ACCOUNTING_RECONCILE_ENABLED", default=False)
# Whether the Rust scheduler runs its own booked reseed, which leaves out the procs of FINISHED
# jobs: then the releases of such procs are not published (docs/redis-protocol.md).
ACCOUNTING_SCHEDULER_RESEEDS = env.bool("ACCOUNTING_SCHEDULER_RESEEDS", default=True)
# A scheduler-managed show with waiting frames and no proc booked for this long is booked by
# nobody (Cuebot's dispatcher skips flagged shows): the guardrail names it.
ACCOUNTING_STRANDED_MINUTES = env.int("ACCOUNTING_STRANDED_MINUTES", default=10)
# Minutes from one check of Cuebot's tables against SUM(proc) to the next (the acct-drift-check
# schedule, made by setup_schedules): the alerts want a check every 15 minutes at least.
ACCOUNTING_DRIFT_CHECK_MINUTES = env.int("ACCOUNTING_DRIFT_CHECK_MINUTES", default=2)
if not 1 <= ACCOUNTING_DRIFT_CHECK_MINUTES <= 10:
    raise BadSetting(
        setting="ACCOUNTING_DRIFT_CHECK_MINUTES",
        problem=f"is {ACCOUNTING_DRIFT_CHECK_MINUTES}",
        accepted="whole minutes from 1 to 10 (CuebotAcctCuebotTablesCheckStale fires after 15 minutes without a check)",
    )
# TTL of the b_scheduler_managed cache (ShowDao's ~30 s in Cuebot).
SHOW_FLAG_CACHE_SECONDS = env.int("SHOW_FLAG_CACHE_SECONDS", default=30)

# How long a process trusts a valid API token without reading it again: the bound on how
# late a revocation (or a deactivated user) takes effect.
AUTH_TOKEN_CACHE_SECONDS = env.int("AUTH_TOKEN_CACHE_SECONDS", default=10)

# Separate database indexes keep the roles apart: flushing the cache or the task
# queue never touches the accounting keys.
CACHE_REDIS_URL = env.str("CACHE_REDIS_URL", default="") or (_LOCAL_REDIS.format(db=1) if _FLAG_ON_RELEASE_PATH else "")
TASK_BROKER_REDIS_URL = env.str("TASK_BROKER_REDIS_URL", default="") or (
    _LOCAL_REDIS.format(db=2) if _FLAG_ON_RELEASE_PATH else ""
)
# A malformed URL stops the process here, in one line naming the variable (infra.bad_setting).
for _name, _url in (
    ("ACCOUNTING_REDIS_URL", ACCOUNTING_REDIS_URL),
    ("CACHE_REDIS_URL", CACHE_REDIS_URL),
    ("TASK_BROKER_REDIS_URL", TASK_BROKER_REDIS_URL),
):
    if _url:
        check_redis_url(setting=_name, url=_url)

# Every Redis client (accounting, cache, broker) is built by infra.redis_factory.
DJANGO_REDIS_CONNECTION_FACTORY = "infra.redis_factory.DjangoRedisConnectionFactory"
DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS = True


def caches_for(*, cache_url: str, broker_url: str) -> dict[str, dict]:
    """CACHES for these two URLs (each plain, redis+sentinel://[:password@]host:port[,host:port...]/<master name>/<db>,
    or empty for none)."""
    if cache_url:
        # An unreachable cache Redis is a miss: the show flag is then read from PostgreSQL, so a
        # cache outage slows releases down instead of failing them.
        options = {"CLIENT_CLASS": "django_redis.client.DefaultClient", "IGNORE_EXCEPTIONS": True}
        found = {"default": {**django_cache(url=cache_url, options=options), "KEY_PREFIX": "cuebot-acct"}}
    else:
        found = {
            # PostgreSQL's acct_cache (accounting 0008), which every process of every instance shares
            # as they share the cache Redis: the drift check's results for the admin's pages, the
            # guardrail's stranded shows, a toggled show's flag. Room far beyond those few keys, so
            # that Django's culling, which drops a third of the keys whatever their age, never runs.
            "default": {
                "BACKEND": "django.core.cache.backends.db.DatabaseCache",
                "LOCATION": "acct_cache",
                "KEY_PREFIX": "cuebot-acct",
                "OPTIONS": {"MAX_ENTRIES": 1_000_000},
            },
            # django-q2 writes its cluster's status to a cache twice a second, for qmonitor and qinfo
            # alone: kept in the process rather than written into the site's database.
            "task_status": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "task-status"},
        }
    if broker_url:
        found["broker"] = django_cache(url=broker_url, options={"CLIENT_CLASS": "django_redis.client.DefaultClient"})
    return found


def q_cluster_for(*, cache_url: str, broker_url: str) -> dict:
    """django-q2's Q_CLUSTER, its broker on the Redis `broker_url` names, or on PostgreSQL without one."""
    return {
        "name": "cuebot-acct",
        "workers": env.int("TASK_WORKERS", default=2),
        "timeout": 600,
        "retry": 900,
        "max_attempts": 3,
        "catch_up": False,
        # Either broker is made quiet and prompt to stop while its server is down (infra.taskbroker).
        **(
            {"django_redis": "broker", "broker_class": "infra.taskbroker.OutageTolerantRedis"}
            if broker_url
            # django-q2's broker on the Django ORM (its django_q_ormq table): an idle pusher asks
            # PostgreSQL once a second, as often as the Redis broker's blocking pop returns.
            else {"orm": "default", "poll": 1.0, "broker_class": "infra.taskbroker.OutageTolerantORM"}
        ),
        **({} if cache_url else {"cache": "task_status"}),
    }


CACHES = caches_for(cache_url=CACHE_REDIS_URL, broker_url=TASK_BROKER_REDIS_URL)
Q_CLUSTER = q_cluster_for(cache_url=CACHE_REDIS_URL, broker_url=TASK_BROKER_REDIS_URL)
# The task cluster (manage.py qcluster, cuebot_acct.taskcluster) stops with status 1 and one
# line when PostgreSQL or its broker has not answered for this long, so that its supervisor
# sees the outage; shorter ones (a restart, a failover) it rides out.
TASK_OUTAGE_SECONDS = env.float("TASK_OUTAGE_SECONDS", default=10.0)
# After SIGTERM, how long the task cluster may take to stop (a worker ends its current task
# first) before what is left of it is killed: below the systemd unit's TimeoutStopSec=30
# (docs/production.md), so that the cluster ends itself and says so.
TASK_STOP_SECONDS = env.float("TASK_STOP_SECONDS", default=10.0)

SESSION_ENGINE = "django.contrib.sessions.backends.db"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# whitenoise serves the static files (the admin's, the API docs') from the installed packages that
# ship them, found at start-up as Django's finders find them: an installed wheel serves them as
# the checkout does, with no collectstatic and no directory to write.
WHITENOISE_USE_FINDERS = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # An unreachable PostgreSQL or Redis is logged in one line, without a traceback (infra.outages).
    "filters": {"outage_in_one_line": {"()": "infra.outages.OutageInOneLine"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["outage_in_one_line"]}
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
