"""WSGI entry point (gunicorn). A worker that cannot work (a malformed setting, the development
secret key, a service down, a site's Cuebot schema lacking what the project uses) exits with one
line and status 3, gunicorn's "worker failed to boot", so the arbiter stops and systemd sees it.
A worker that boots records itself in the fleet register every 30 s, runs the publish guardrail
(which only warns) and says in one line what it writes and which servers it uses."""

import logging
import os
import sys

import django
from django.core.wsgi import get_wsgi_application

from infra.bad_setting import BadSetting

WORKER_BOOT_ERROR = 3  # gunicorn.arbiter.Arbiter.WORKER_BOOT_ERROR

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
try:
    django.setup(set_prefix=False)  # loads the settings, which refuse a malformed value
except BadSetting as problem:
    sys.stderr.write(f"cuebot-acct: {problem}\n")
    sys.exit(WORKER_BOOT_ERROR)

from infra.startup import StartupRefused, check_secret_key, check_services, servers_line  # noqa: E402
from shows.attach import check_cuebot_schema  # noqa: E402

try:
    check_secret_key()
    check_services()
    check_cuebot_schema()
except StartupRefused as problem:
    sys.stderr.write(f"cuebot-acct: {problem}\n")
    sys.exit(WORKER_BOOT_ERROR)

from accounting.operators.release_lane import ReleaseLane  # noqa: E402
from accounting.ownership.fleet import start_process_heartbeat  # noqa: E402
from accounting.ownership.guardrail import run_guardrail_at_start  # noqa: E402
from infra.writes import mode_line  # noqa: E402

# Django's handler (its middleware: whitenoise, ...) built only once the worker may serve; Cuebot's
# releases answered ahead of it when the API would take them as they stand (issue 35).
application = ReleaseLane(get_wsgi_application())

start_process_heartbeat(role="web")
run_guardrail_at_start()
logging.getLogger("cuebot_acct").info("web worker %d started; %s; %s", os.getpid(), mode_line(), servers_line())
