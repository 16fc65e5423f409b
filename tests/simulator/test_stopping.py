"""A run's threads end with the block that started them, against one deadline, however it ends."""

import threading

import pytest

from simulator.stopping import RunFailed, Threads


def test_the_block_tells_its_threads_to_stop_and_joins_them():
    stop = threading.Event()
    with Threads(stop=stop) as threads:
        threads.start(stop.wait, name="sim-waiting")
    assert stop.is_set() and not threads.threads[0].is_alive()


def test_a_thread_that_does_not_stop_fails_the_run_naming_it_at_the_deadline():
    released = threading.Event()
    try:
        with pytest.raises(RunFailed, match=r"^sim-deaf did not stop within 0.2 s of being told to$"):
            with Threads(stop=threading.Event(), seconds=0.2) as threads:
                threads.start(released.wait, 10, name="sim-deaf")
        assert threads.threads[0].daemon  # it cannot keep the failed process alive
    finally:
        released.set()


def test_a_run_that_failed_already_keeps_its_own_reason():
    released = threading.Event()
    try:
        with pytest.raises(ValueError, match="the first reason"):
            with Threads(stop=threading.Event(), seconds=0.2) as threads:
                threads.start(released.wait, 10, name="sim-deaf")
                raise ValueError("the first reason")
    finally:
        released.set()
