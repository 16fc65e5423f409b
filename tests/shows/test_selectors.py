from datetime import timedelta

import pytest
from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounting.ownership.toggle import set_scheduler_managed
from shows.models import Show
from shows.selectors import (
    ShowNameUnusable,
    count_scheduler_managed_shows,
    flag_cache_key,
    get_show_by_name,
    is_scheduler_managed,
    list_shows,
    show_named,
    stranded_shows,
)
from tests.farms import build_farm

pytestmark = pytest.mark.django_db


def test_own_toggle_is_seen_at_once_through_the_shared_cache(cuebot_farm, django_capture_on_commit_callbacks):
    show = cuebot_farm.show
    assert is_scheduler_managed(show_id=show.id) is False  # now cached as False for 30 s
    with django_capture_on_commit_callbacks(execute=True):
        set_scheduler_managed(show=show, managed=True)
    # The writer refreshed the shared Redis cache itself: no stale 30 s window anywhere.
    assert cache.get(flag_cache_key(show_id=show.id)) is True
    assert is_scheduler_managed(show_id=show.id) is True


def test_cache_is_refreshed_only_after_commit(cuebot_farm, django_capture_on_commit_callbacks):
    show = cuebot_farm.show
    is_scheduler_managed(show_id=show.id)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        set_scheduler_managed(show=show, managed=True)
        assert cache.get(flag_cache_key(show_id=show.id)) is False
    for callback in callbacks:
        callback()
    assert cache.get(flag_cache_key(show_id=show.id)) is True


def test_rolled_back_toggle_leaves_the_cache_alone(cuebot_farm, django_capture_on_commit_callbacks):
    show = cuebot_farm.show
    assert is_scheduler_managed(show_id=show.id) is False
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            set_scheduler_managed(show=show, managed=True)
            raise RuntimeError("the surrounding transaction fails")
    assert callbacks == []
    assert cache.get(flag_cache_key(show_id=show.id)) is False
    assert Show.objects.get(pk=show.pk).b_scheduler_managed is False


def test_write_behind_the_services_back_is_seen_once_the_ttl_runs_out(cuebot_farm):
    show = cuebot_farm.show
    key = flag_cache_key(show_id=show.id)
    assert is_scheduler_managed(show_id=show.id) is False
    Show.objects.filter(pk=show.pk).update(b_scheduler_managed=True)  # e.g. an SQL console
    assert is_scheduler_managed(show_id=show.id) is False  # stale, but bounded:
    assert 0 < cache.ttl(key) <= settings.SHOW_FLAG_CACHE_SECONDS == 30
    cache.expire(key, timeout=0)  # time moves past the TTL (Redis expires the key)
    assert cache.get(key) is None
    assert is_scheduler_managed(show_id=show.id) is True


def test_count_and_lookups(farm, cuebot_farm):
    assert count_scheduler_managed_shows() == 1
    assert get_show_by_name(name=farm.show.str_name) == farm.show
    assert get_show_by_name(name="no-such-show") is None
    assert [s.str_name for s in list_shows()] == sorted([farm.show.str_name, cuebot_farm.show.str_name])


def test_show_named_is_the_one_show_or_one_error_saying_none_or_several(farm, cuebot_farm):
    assert show_named(name=farm.show.str_name) == farm.show
    with pytest.raises(ShowNameUnusable, match="no show named 'no-such-show'") as none:
        show_named(name="no-such-show")
    assert not none.value.several
    Show.objects.filter(pk=cuebot_farm.show.pk).update(str_name=farm.show.str_name)
    with pytest.raises(ShowNameUnusable, match="several shows are named") as several:
        show_named(name=farm.show.str_name)
    assert several.value.several


def test_an_unreachable_flag_cache_falls_back_to_postgresql(farm, settings, caplog):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    settings.CACHE_REDIS_URL = f"redis://127.0.0.1:{closed}/0"  # the flag tracker's
    settings.CACHES = {
        **settings.CACHES,
        "default": {**settings.CACHES["default"], "LOCATION": [settings.CACHE_REDIS_URL]},
    }
    # A cache outage must not stop releases: the flag is read from PostgreSQL instead.
    assert is_scheduler_managed(show_id=farm.show.id) is True
    Show.objects.filter(pk=farm.show.pk).update(b_scheduler_managed=False)
    assert is_scheduler_managed(show_id=farm.show.id) is False
    assert any("Connection" in r.getMessage() or r.exc_info for r in caplog.records)


def test_stranded_shows_is_one_read_only_statement_whatever_the_number_of_shows():
    farms = [build_farm(managed=True) for _ in range(3)]
    for farm in farms:
        farm.add_frame()
    farms[0].add_proc(cores=100)
    with CaptureQueriesContext(connection) as queries:
        found = stranded_shows(since=timezone.now() - timedelta(minutes=10))
    assert [s.id for s in found] == [f.show.id for f in sorted(farms[1:], key=lambda f: f.show.str_name)]
    assert all(s.last_booked is None for s in found)
    (query,) = queries.captured_queries
    assert query["sql"].lstrip().startswith("SELECT")
