"""Maestro era (OpenCue v1.34.20 and later): Cuebot owns the five accounting tables for every show.

The flag only says that Maestro, inside Cuebot, plans the show; Maestro's bookings add to the
five tables and every release takes off them, flagged or not, as Cuebot's procDestroyed and
batchDeleteVirtualProcs do. Nothing is published or sent, and no accounting Redis is touched;
the flag is not even read (no read before any lock, no cache round trip).
"""

from collections.abc import Collection

from accounting.release.eras.base import Counting, PublishesNothing, SendsNothing
from accounting.release.types import Branch
from infra.era import MAESTRO


class MaestroEra(PublishesNothing, SendsNothing):
    name = MAESTRO

    def counting(self, *, show_ids: Collection[str]) -> Counting:
        return Counting(branches=dict.fromkeys(show_ids, Branch.CUEBOT), settling=frozenset())
