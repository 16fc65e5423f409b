"""The show flags held in the process (shows.flag_tracking): no round trip on a hit, yet a
change made anywhere is seen by the next read, and a lost invalidation channel serves nothing
from the process."""

import pytest
import redis
from django.conf import settings
from django.core.cache import cache
from django_redis import get_redis_connection

from shows.flag_tracking import show_keys
from shows.models import Show
from shows.selectors import flag_cache_key, ownership, settling_cache_key


@pytest.fixture
def cache_commands(monkeypatch):
    """Commands the service's cache client sends."""
    client = get_redis_connection("default")
    sent: list[str] = []
    original = client.execute_command
    monkeypatch.setattr(client, "execute_command", lambda *args, **kw: sent.append(args[0]) or original(*args, **kw))
    return sent


def other_connection() -> redis.Redis:
    """A client of the cache Redis that is not this process's tracked or pooled one."""
    return redis.Redis.from_url(settings.CACHE_REDIS_URL)


def test_a_warm_flag_costs_no_round_trip(farm, cache_commands):
    assert ownership(show_id=farm.show.id).scheduler_managed is True  # from PostgreSQL, into the shared cache
    assert ownership(show_id=farm.show.id).scheduler_managed is True  # from the shared cache, kept
    cache_commands.clear()
    for _ in range(3):
        assert ownership(show_id=farm.show.id).scheduler_managed is True
    assert cache_commands == []


def test_a_change_made_by_another_connection_is_seen_by_the_next_read(farm, cache_commands):
    assert ownership(show_id=farm.show.id).scheduler_managed is True
    writer = other_connection()
    # What another process's toggle writes (django-redis pickles the bool) and its settling mark.
    writer.set(cache.make_key(flag_cache_key(show_id=farm.show.id)), cache.client.encode(False))
    writer.set(cache.make_key(settling_cache_key(show_id=farm.show.id)), cache.client.encode(True))
    seen = ownership(show_id=farm.show.id)
    assert (seen.scheduler_managed, seen.settling) == (False, True)
    writer.delete(cache.make_key(settling_cache_key(show_id=farm.show.id)))
    assert ownership(show_id=farm.show.id).settling is False


def test_expiry_and_flush_reach_the_process(farm):
    key = flag_cache_key(show_id=farm.show.id)
    assert ownership(show_id=farm.show.id).scheduler_managed is True
    Show.objects.filter(pk=farm.show.pk).update(b_scheduler_managed=False)  # behind the service's back
    assert ownership(show_id=farm.show.id).scheduler_managed is True  # the shared cache still says so
    cache.expire(key, timeout=0)  # the TTL runs out: Redis deletes the key and says so
    assert ownership(show_id=farm.show.id).scheduler_managed is False
    Show.objects.filter(pk=farm.show.pk).update(b_scheduler_managed=True)
    cache.clear()
    assert ownership(show_id=farm.show.id).scheduler_managed is True


def test_a_lost_invalidation_channel_falls_back_to_reading_redis(farm, cache_commands):
    assert ownership(show_id=farm.show.id).scheduler_managed is True
    tracker = show_keys()
    writer = other_connection()
    writer.execute_command("CLIENT", "KILL", "ID", tracker.client_id)
    # Written while no push can reach the process: the stale value must not be served.
    writer.set(cache.make_key(flag_cache_key(show_id=farm.show.id)), cache.client.encode(False))
    cache_commands.clear()
    assert ownership(show_id=farm.show.id).scheduler_managed is False
    assert cache_commands == ["MGET"]


def test_pushes_arriving_together_are_all_applied(farm, cuebot_farm):
    shows = [farm.show, cuebot_farm.show]
    for _ in range(2):
        assert [ownership(show_id=s.id).scheduler_managed for s in shows] == [True, False]
    writer = other_connection()
    # Two writes, two pushes (one per event-loop pass), both waiting when the next read comes.
    writer.set(cache.make_key(flag_cache_key(show_id=shows[0].id)), cache.client.encode(False))
    writer.set(cache.make_key(flag_cache_key(show_id=shows[1].id)), cache.client.encode(True))
    # Reading the first takes both off the socket at once; the second must not stay buffered.
    assert [ownership(show_id=s.id).scheduler_managed for s in shows] == [False, True]
