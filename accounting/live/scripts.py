"""Loads the .lua files beside this module and runs them with EVALSHA.

A NOSCRIPT reply means the server did not run the script (its cache was flushed or
Redis restarted), so loading and sending it again cannot apply it twice. Nothing else
is ever resent: a timeout or a broken connection may hide a script that ran.
"""
from dataclasses import dataclass, field
from functools import cache
from hashlib import sha1
from pathlib import Path

import redis

LUA_DIR = Path(__file__).resolve().parent / "lua"


@dataclass(frozen=True)
class LuaScript:
    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", sha1(self.source.encode()).hexdigest())

    def run(self, client: redis.Redis, *, keys: list[str], args: list) -> object:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)


@cache
def script(name: str) -> LuaScript:
    return LuaScript(name=name, source=(LUA_DIR / f"{name}.lua").read_text())
