"""A show named on a command line: the one lookup (shows.selectors.show_named) and the one way a
command refuses a name that names no show or several (exit status 2, nothing changed)."""

from django.core.management.base import CommandError

from shows.models import Show
from shows.selectors import ShowNameUnusable, show_named


def show_argument(*, name: str) -> Show:
    try:
        return show_named(name=name)
    except ShowNameUnusable as error:
        raise CommandError(f"{error}; nothing changed", returncode=2) from None
