"""Scripts sent on a thread's held connection (LuaScript.run_held, infra.redis_factory
held_connection): the same commands as through the client, and never a reply read twice."""

import threading

import pytest
import redis

from accounting.live.scripts import LuaScript
from infra.redis_factory import build_client, held_connection
from tests.redis_topology import redis_server

ECHO = LuaScript(name="echo", source="return ARGV[1]")
COUNT = LuaScript(name="count", source="return redis.call('INCR', KEYS[1])")


@pytest.fixture
def server():
    with redis_server() as running:
        yield running


def test_a_reply_that_timed_out_is_never_read_as_the_next_calls(server):
    client = build_client(url=server.url(), timeout=0.3)
    assert ECHO.run_held(client, keys=[], args=["warm"]) == b"warm"

    server.pause()
    try:
        with pytest.raises(redis.TimeoutError):
            ECHO.run_held(client, keys=[], args=["first"])
    finally:
        server.resume()  # the server now answers "first", on the connection the timeout closed

    assert ECHO.run_held(client, keys=[], args=["second"]) == b"second"


def test_a_flushed_script_is_loaded_and_run_once(server):
    client = build_client(url=server.url(), timeout=2)
    assert COUNT.run_held(client, keys=["n"], args=[]) == 1
    client.script_flush()

    assert COUNT.run_held(client, keys=["n"], args=[]) == 2
    assert int(client.get("n")) == 2


def test_an_error_reply_keeps_the_connection(server):
    client = build_client(url=server.url(), timeout=2)
    broken = LuaScript(name="broken", source="return redis.call('NO-SUCH-COMMAND')")
    connection = held_connection(client)

    with pytest.raises(redis.ResponseError):
        broken.run_held(client, keys=[], args=[])

    assert ECHO.run_held(client, keys=[], args=["after"]) == b"after"
    assert held_connection(client) is connection


def test_each_thread_holds_its_own_connection_and_a_restarted_server_is_reached_again(server):
    client = build_client(url=server.url(), timeout=2)
    mine = held_connection(client)
    theirs = []
    other = threading.Thread(target=lambda: theirs.append(held_connection(client)))
    other.start()
    other.join()
    assert theirs[0] is not mine
    assert held_connection(client) is mine

    server.restart()
    with pytest.raises(redis.ConnectionError):
        ECHO.run_held(client, keys=[], args=["lost"])  # sent once, on the connection the restart closed

    assert ECHO.run_held(client, keys=[], args=["back"]) == b"back"
