"""The write commands' answer while ACCOUNTING_WRITES is off: the service's one sentence, as a
CommandError (exit status 2, the commands' "refused, nothing changed"), not a traceback."""

import functools
from collections.abc import Callable

from django.core.management.base import CommandError

from cuebot_acct.writes import WritesOff


def refused_while_observing(handle: Callable) -> Callable:
    """Wrap a command's handle(): a write face refused by ACCOUNTING_WRITES=off ends in one line."""

    @functools.wraps(handle)
    def handled(self, *args, **options):
        try:
            return handle(self, *args, **options)
        except WritesOff as refused:
            raise CommandError(str(refused), returncode=2) from None

    return handled
