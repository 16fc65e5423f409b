"""WSGI entry point (gunicorn). Refuses to boot a worker against unreachable services."""
import os
import sys

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
application = get_wsgi_application()

from cuebot_acct.startup import ServiceUnreachable, check_services  # noqa: E402

try:
    check_services()
except ServiceUnreachable as problem:
    sys.stderr.write(f"cuebot-acct: {problem}\n")
    sys.exit(1)
