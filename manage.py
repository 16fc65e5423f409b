#!/usr/bin/env python
"""Django's command-line utility for cuebot-acct."""
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    from cuebot_acct.startup import run_with_clear_service_errors

    run_with_clear_service_errors(sys.argv)


if __name__ == "__main__":
    main()
