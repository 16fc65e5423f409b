"""WSGI entry point (gunicorn). Refuses to boot a worker against unreachable services, or
against a site's Cuebot database that lacks what the project uses.

Once the services answer, the worker records itself in the fleet register (and keeps
doing so every 30 s) and runs the publish guardrail, which warns but never stops it.
"""
import os
import sys

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
application = get_wsgi_application()

from cuebot_acct.startup import StartupRefused, check_services  # noqa: E402
from shows.attach import check_cuebot_schema  # noqa: E402

try:
    check_services()
    check_cuebot_schema()
except StartupRefused as problem:
    sys.stderr.write(f"cuebot-acct: {problem}\n")
    sys.exit(1)

from accounting.ownership.fleet import start_process_heartbeat  # noqa: E402
from accounting.ownership.guardrail import run_guardrail_at_start  # noqa: E402

start_process_heartbeat(role="web")
run_guardrail_at_start()
