import uuid

import pytest
from django.db import connection

from accounting.notify.listen import heard, open_listener
from accounting.notify.payloads import RELEASE


@pytest.fixture
def notify_on(settings):
    settings.ACCOUNTING_SCHEDULER = "redis,notify"


class Ear:
    """A LISTEN connection on both channels, as the scheduler holds one."""

    def __init__(self):
        self.connection = open_listener()

    def collect(self) -> list[tuple[str, str]]:
        """Every (channel, payload) committed so far, in delivery order.

        A marker committed now, after everything the test did, arrives after all of it
        (PostgreSQL delivers in commit order): reading up to it awaits the event instead of
        a sleep, and proves a negative ("nothing was heard") as well as a positive.
        """
        marker = f"marker-{uuid.uuid4()}"
        with connection.cursor() as cursor:  # outside an atomic block: commits, so it notifies
            cursor.execute("SELECT pg_notify(%s, %s)", [RELEASE, marker])
        out = []
        for one in heard(listener=self.connection, timeout=10):
            if one.payload == marker:
                return out
            out.append((one.channel, one.payload))
        raise AssertionError("the marker notification never arrived")


@pytest.fixture
def ear(transactional_db):
    listening = Ear()
    yield listening
    listening.connection.close()
