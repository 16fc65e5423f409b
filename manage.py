#!/usr/bin/env python
"""Django's command-line utility for cuebot-acct: every command reports a malformed setting or an
unreachable service in one line (infra.startup), and `qcluster` runs the task cluster
under this project's supervision (cuebot_acct.taskcluster) instead of django-q2's command."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    from cuebot_acct.taskcluster import run_task_cluster
    from infra.startup import run_with_clear_service_errors

    run_with_clear_service_errors(sys.argv, serving={"qcluster": run_task_cluster})


if __name__ == "__main__":
    main()
