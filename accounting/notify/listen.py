"""Hearing the notifications as the scheduler hears them, on a connection of its own.

The scheduler's store cannot be read from outside; what it is told can. LISTEN needs a
session that outlives any transaction, so this opens its own autocommit connection with
the service's database settings, not Django's (whose connection belongs to the request
or command, inside transactions). Payloads are decoded as the scheduler decodes them:
one it would drop is reported as such, not hidden.
"""

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
from django.db import connection

from accounting.notify.payloads import CHANNELS, LIMIT_CHANGE, RELEASE

# The fields the scheduler reads, and how it parses each (listener.rs: Uuid, i64, i32).
_RELEASE_FIELDS = {"show": "uuid", "alloc": "uuid", "folder": "uuid", "job": "uuid", "cores": "i64", "gpus": "i32"}
_LIMIT_FIELDS = {
    "sub": {"show": "uuid", "alloc": "uuid", "burst": "i64"},
    "folder": {"id": "uuid", "max_cores": "i64?", "max_gpus": "i64?"},
    "job": {"id": "uuid", "max_cores": "i64?", "max_gpus": "i64?"},
}
_BOUNDS = {"i64": 2**63, "i32": 2**31}


@dataclass(frozen=True)
class Heard:
    channel: str
    payload: str
    fields: dict = field(default_factory=dict)  # the decoded JSON object ({} if not an object)
    problem: str | None = None  # why the scheduler would drop it; None if it parses


def _problem(fields: dict, expected: dict[str, str]) -> str | None:
    for name, kind in expected.items():
        optional = kind.endswith("?")
        if name not in fields:
            if optional:
                continue
            return f"missing {name}"
        value = fields[name]
        if kind == "uuid":
            try:
                uuid.UUID(str(value))
            except ValueError:
                return f"{name} is not a UUID: {value!r}"
            if not isinstance(value, str):
                return f"{name} is not a string"
        else:
            bound = _BOUNDS[kind.rstrip("?")]
            if isinstance(value, bool) or not isinstance(value, int) or not -bound <= value < bound:
                return f"{name} is not an {kind.rstrip('?')}: {value!r}"
    return None


def decode(*, channel: str, payload: str) -> Heard:
    """Parse a payload the way the scheduler's listener does; `problem` says why it would drop it."""
    try:
        fields = json.loads(payload)
    except ValueError as error:
        return Heard(channel=channel, payload=payload, problem=f"not JSON ({error})")
    if not isinstance(fields, dict):
        return Heard(channel=channel, payload=payload, problem="not a JSON object")
    if channel == RELEASE:
        expected = _RELEASE_FIELDS
    elif channel == LIMIT_CHANGE and fields.get("vertex") in _LIMIT_FIELDS:
        expected = _LIMIT_FIELDS[fields["vertex"]]
    else:
        return Heard(
            channel=channel, payload=payload, fields=fields, problem=f"unknown vertex {fields.get('vertex')!r}"
        )
    return Heard(channel=channel, payload=payload, fields=fields, problem=_problem(fields, expected))


def open_listener(*, channels: tuple[str, ...] = CHANNELS) -> psycopg.Connection:
    """An autocommit connection to the service's database, listening on `channels`."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    listener = psycopg.connect(**params, autocommit=True)
    for channel in channels:
        if channel not in CHANNELS:
            raise ValueError(f"unknown channel {channel!r}; one of {', '.join(CHANNELS)}")
        listener.execute(f"LISTEN {channel}")
    return listener


def heard(
    *, listener: psycopg.Connection, timeout: float | None = None, stop_after: int | None = None
) -> Iterator[Heard]:
    """The notifications as they arrive, until `timeout` seconds pass without one (None: forever)
    or `stop_after` have been heard."""
    for notification in listener.notifies(timeout=timeout, stop_after=stop_after):
        yield decode(channel=notification.channel, payload=notification.payload)
