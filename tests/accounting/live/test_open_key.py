"""The one "is this key open for booking?" rule (lua/shared/open_key.lua): limit_write.lua and
reseed_write.lua, on the real Redis, answer alike for every field, and every field a limit
write sets opens a key for both."""

import pytest

from accounting.live import keys
from accounting.live.scripts import script
from accounting.reconcile.snapshot import limit_rows

pytestmark = pytest.mark.django_db

TOKEN = "rebuild-token"
KEY = "acct:folder:probe"


def opened_by_limit_write(client) -> bool:
    """A publish to an unseeded Redis goes ahead only on keys already open."""
    written = script("limit_write").run(
        client,
        keys=[keys.SEQ, keys.SEEDED, keys.LIMITS_REFUSED, keys.CLOSED_SHOWS],
        args=[keys.SEEDED_VALUE, "1", KEY, "int_max_cores", 7],
    )
    return int(written) != 0


def opened_by_reseed_write(client) -> bool:
    """A rebuild of closed keys skips a key that is open."""
    client.set(keys.BOOTSTRAPPING, TOKEN)
    ok, written, skipped = script("reseed_write").run(
        client,
        keys=[keys.SEQ, keys.INFLIGHT, keys.BOOTSTRAPPING, keys.SETTLED_SEQ, keys.SETTLED],
        args=["closed", TOKEN, KEY, 0, 0],
    )
    assert int(ok) == 1
    return int(skipped) == 1


def answers(client, field: str) -> tuple[bool, bool]:
    """Both scripts' answer for a key that carries only `field`, each on a fresh copy of it."""
    found = []
    for opened in (opened_by_limit_write, opened_by_reseed_write):
        client.flushdb()
        client.hset(KEY, field, 1)
        found.append(opened(client))
    return found[0], found[1]


def test_both_scripts_agree_on_every_field(farm, acct_redis):
    limit_fields = {name for _, name, _ in limit_rows(show_ids=[farm.show.id])}
    assert "show_id" in limit_fields and "burst" in limit_fields
    for field in sorted(limit_fields):
        assert answers(acct_redis, field) == (True, True), field
    for field in ("int_cores", "int_gpus", "unrelated"):
        assert answers(acct_redis, field) == (False, False), field
