"""Loads the .lua files beside this module and runs them with redis-py's `Script`.

`Script` sends EVALSHA and, on a NOSCRIPT reply only, loads the text and sends EVALSHA
again: NOSCRIPT means the server did not run the script (its cache was flushed or Redis
restarted), so the second send cannot apply it twice. Nothing else is ever resent: a
timeout or a broken connection may hide a script that ran, and every client from
`infra.redis_factory` has redis-py's own retries off.

What is ours, and why:
- The client is passed on every call instead of being registered once
  (`client.register_script`): callers take `accounting_redis()` at call time, and the tests
  and the simulator hand in other clients (a stalled proxy, a restarted server), so one
  loaded script follows whichever client runs it.
- Shared Lua. Lua in Redis has no include, so a script that needs a rule another script
  uses names it in a header line `-- shared: <name>` and the loader puts
  `lua/shared/<name>.lua` before the script's text. What is sent (and hashed) is that
  whole text; `LuaScript.source` holds it.
- `LuaScript` keeps the script's name, for logs and for tests that watch which script ran.
"""

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import redis
from redis.commands.core import Script

from infra.redis_factory import held_connection

LUA_DIR = Path(__file__).resolve().parent / "lua"
SHARED_DIR = LUA_DIR / "shared"
SHARED_LINE = re.compile(r"^-- shared: (\w+)$", re.MULTILINE)


@dataclass(frozen=True)
class LuaScript:
    name: str
    source: str
    _script: Script = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Encoded here, so Script needs no registered client (it asks one only to encode str).
        object.__setattr__(self, "_script", Script(None, self.source.encode()))  # type: ignore[arg-type]

    @property
    def sha(self) -> str:
        return self._script.sha

    def run(self, client: redis.Redis, *, keys: list[str], args: list) -> object:
        return self._script(keys=keys, args=args, client=client)

    def run_held(self, client: redis.Redis, *, keys: list[str], args: list) -> object:
        """run(), sent on this thread's own connection to the client's server (held_connection):
        the release path's two calls a release (issue 35: the client's per-command pool checkout,
        retry wrapper and observability hooks cost a release 15 µs a call). The same commands as
        Script: EVALSHA, and on NOSCRIPT alone the text loaded and EVALSHA sent once more.
        redis-py's connection disconnects itself when a send or a read fails other than by an error
        reply (a timeout, a reset), so a reply still on its way is never read as the next
        command's, and held_connection takes another (tests/accounting/live/test_scripts.py)."""
        connection = held_connection(client)
        connection.send_command("EVALSHA", self.sha, len(keys), *keys, *args)
        try:
            return connection.read_response()
        except redis.exceptions.NoScriptError:
            connection.send_command("SCRIPT", "LOAD", self.source)
            connection.read_response()
            connection.send_command("EVALSHA", self.sha, len(keys), *keys, *args)
            return connection.read_response()


def with_shared(text: str) -> str:
    """The script's text after the shared snippets its `-- shared:` lines name, in that order."""
    snippets = [(SHARED_DIR / f"{name}.lua").read_text() for name in SHARED_LINE.findall(text)]
    return "".join(snippets) + text


@cache
def script(name: str) -> LuaScript:
    return LuaScript(name=name, source=with_shared((LUA_DIR / f"{name}.lua").read_text()))
