"""The release path's one seam (accounting.release.eras.publishers_wrapped) and the client a
RedisReleasePublisher sends to: what the simulator's publish-drop fault stands on, instead of
patching a module's names."""

import pytest
from prometheus_client import REGISTRY

from accounting.models import Proc
from accounting.release.eras import publishers_wrapped, release_era
from accounting.release.publish import RedisReleasePublisher, breaker
from accounting.release.unbook import unbook_proc
from infra.redis_factory import accounting_redis
from tests.accounting.release.test_unbook import hashes, seed_keys
from tests.processes import closed_port

pytestmark = pytest.mark.django_db


class Recording:
    """A publisher in front of the era's: records each call and passes it on."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, []

    def prepare(self, *, releases):
        self.calls.append("prepare")
        return self.inner.prepare(releases=releases)

    def publish(self, *, prepared):
        self.calls.append("publish")
        return self.inner.publish(prepared=prepared)


def test_a_release_in_the_block_goes_through_the_wrapper_and_none_after(
    farm, acct_redis, django_capture_on_commit_callbacks
):
    first, second = farm.add_proc(cores=200), farm.add_proc(cores=100)
    names = seed_keys(acct_redis, farm, cores=3)
    original = release_era()
    made: list[Recording] = []

    def wrap(publisher):
        made.append(Recording(publisher))
        return made[-1]

    with publishers_wrapped(wrap):
        era = release_era()
        assert era.name == original.name and era.counting.__func__ is original.counting.__func__
        with django_capture_on_commit_callbacks(execute=True):
            unbook_proc(proc_id=first.id)
    [recording] = [r for r in made if r.inner is original.publisher]
    assert recording.calls == ["prepare", "publish"]
    # The wrapped publisher passed the release on: Redis took its two cores off.
    assert hashes(acct_redis, names) == {role: {"int_cores": "1", "int_gpus": "0"} for role in names}

    assert release_era() is original
    with django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=second.id)
    assert recording.calls == ["prepare", "publish"]  # the block is over: nothing more through it
    assert hashes(acct_redis, names) == {role: {"int_cores": "0", "int_gpus": "0"} for role in names}


def test_a_second_block_is_refused_and_leaves_the_first_in_place():
    with publishers_wrapped(Recording):
        inside = release_era().publisher
        with pytest.raises(RuntimeError, match="wrapped already"):
            with publishers_wrapped(Recording):
                pass
        assert release_era().publisher is inside
    assert not isinstance(release_era().publisher, Recording)


def test_a_publisher_sends_to_the_client_it_was_given(farm, acct_redis, django_capture_on_commit_callbacks):
    proc = farm.add_proc(cores=200)
    names = seed_keys(acct_redis, farm, cores=2)
    unreachable = f"redis://127.0.0.1:{closed_port()}/0"
    before = REGISTRY.get_sample_value("cuebot_acct_release_publish_failures_total", {"stage": "publish"}) or 0.0

    def through_a_dead_link(publisher):
        if not isinstance(publisher, RedisReleasePublisher):
            return publisher
        dead = RedisReleasePublisher(client=lambda: type(accounting_redis()).from_url(unreachable))
        return _PrepareHere(prepare=publisher, publish=dead)

    with publishers_wrapped(through_a_dead_link), django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=proc.id)

    assert not Proc.objects.filter(pk=proc.id).exists()  # the commit stands
    # The publish went to the unreachable Redis: failed, counted, breaker open, counters left high.
    assert REGISTRY.get_sample_value("cuebot_acct_release_publish_failures_total", {"stage": "publish"}) == before + 1
    assert breaker.is_open()
    assert hashes(acct_redis, names) == {role: {"int_cores": "2", "int_gpus": "0"} for role in names}


class _PrepareHere:
    """prepare through one publisher (the reachable Redis), publish through another."""

    def __init__(self, *, prepare, publish) -> None:
        self._prepare, self._publish = prepare, publish

    def prepare(self, *, releases):
        return self._prepare.prepare(releases=releases)

    def publish(self, *, prepared):
        return self._publish.publish(prepared=prepared)
