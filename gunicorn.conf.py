"""gunicorn's configuration, read from the working directory (the checkout: `make run`, the
systemd unit's WorkingDirectory): the master refuses to start, in one line and with status 1,
before it binds or boots a worker, when the settings are malformed, the secret key is the
development one, or PostgreSQL or Redis does not answer.

Each worker checks the same at boot (cuebot_acct.wsgi) and exits with gunicorn's boot-error
status, on which the master stops. But when several workers fail together, gunicorn's master
meets the second failure while it is already stopping and dies of it with a traceback
(benoitc/gunicorn#2393 and its many duplicates); checking once here, before any worker
exists, leaves one line. The command line is unchanged; this file only adds the hook.
"""

import os
import sys


def on_starting(server) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    from django.conf import settings
    from django.db import connections

    from infra.bad_setting import BadSetting
    from infra.startup import StartupRefused, check_secret_key, check_services

    try:
        settings.INSTALLED_APPS  # noqa: B018  (loading the settings is the check: they refuse a malformed value)
        try:
            check_secret_key()
            check_services()
        finally:
            connections.close_all()  # no connection of the master's is inherited by the workers forked later
    except (BadSetting, StartupRefused) as problem:
        sys.stderr.write(f"cuebot-acct: {problem}\n")
        sys.exit(1)
