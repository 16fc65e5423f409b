"""WSGI entry point (gunicorn). Refuses to boot a worker with the development secret key,
against unreachable services, or against a site's Cuebot database that lacks what the
project uses: one line, and exit status 3, gunicorn's "worker failed to boot", on which its
arbiter stops instead of booting workers forever, so systemd sees the failure.

Once the services answer, the worker records itself in the fleet register (and keeps
doing so every 30 s) and runs the publish guardrail, which warns but never stops it.
"""
import os
import sys

import django
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
django.setup(set_prefix=False)

from cuebot_acct.startup import StartupRefused, check_secret_key, check_services  # noqa: E402
from shows.attach import check_cuebot_schema  # noqa: E402

WORKER_BOOT_ERROR = 3  # gunicorn.arbiter.Arbiter.WORKER_BOOT_ERROR

try:
    check_secret_key()
    check_services()
    check_cuebot_schema()
except StartupRefused as problem:
    sys.stderr.write(f"cuebot-acct: {problem}\n")
    sys.exit(WORKER_BOOT_ERROR)

application = get_wsgi_application()  # the middleware (whitenoise, ...) only once it may serve

from accounting.ownership.fleet import start_process_heartbeat  # noqa: E402
from accounting.ownership.guardrail import run_guardrail_at_start  # noqa: E402

start_process_heartbeat(role="web")
run_guardrail_at_start()
