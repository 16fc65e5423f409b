"""The task cluster's brokers (django-q2's on Redis, or on the Django ORM where no
TASK_BROKER_REDIS_URL is set), quiet and prompt while their server is down: whether the
cluster goes on is decided once, by the watchdog of cuebot_acct.taskcluster."""

import logging
import threading

import redis
from django_q.brokers import Broker
from django_q.brokers.orm import ORM
from django_q.brokers.redis_broker import Redis

from infra.outages import is_postgresql_outage

logger = logging.getLogger(__name__)

# How long a dequeue waits after its server refused it: django-q2's own blocking pop waits 1 s
# on an empty queue (and the ORM broker polls once a second, settings), so the pusher looks at
# its stop event as often as it does when idle.
RETRY_PAUSE_SECONDS = 1.0


# django-q2's pusher treats a failed dequeue as a dead broker: it logs a traceback, sleeps 10 s
# and exits, and the sentinel starts another that does the same (a SIGTERM meanwhile waits out the
# sleep); the cluster's status key, written every half second, logs an error per write. Here a
# dequeue that cannot reach its server waits a moment and returns nothing (the pusher then checks
# its stop event, as after an empty queue), and such a status write is skipped (the key lives 3 s
# and only feeds qmonitor). Anything else fails as django-q2 would have it fail.
class OutageTolerant(Broker):
    """Put before a django-q2 broker: its dequeue and status write, tolerant of the outages
    `unreachable` recognises."""

    def __init__(self, list_key: str | None = None):
        super().__init__(list_key=list_key)
        self._pause = threading.Event()  # never set: wait() is an interruptible sleep
        self._down = False

    @staticmethod
    def unreachable(error: Exception) -> bool:
        raise NotImplementedError

    def dequeue(self):
        try:
            tasks = super().dequeue()
        except Exception as error:
            if not self.unreachable(error):
                raise
            if not self._down:  # once per outage, not once a second
                logger.warning("task broker unreachable (%s); the pusher waits for it", error)
            self._down = True
            self._pause.wait(RETRY_PAUSE_SECONDS)
            return None
        if self._down:
            logger.info("task broker answers again")
            self._down = False
        return tasks

    def set_stat(self, key: str, value: str, timeout: int):
        try:
            super().set_stat(key, value, timeout)
        except Exception as error:
            if not self.unreachable(error):
                raise
            # a monitoring key with a 3 s life; the watchdog reports the outage itself


class OutageTolerantRedis(OutageTolerant, Redis):
    @staticmethod
    def unreachable(error: Exception) -> bool:
        return isinstance(error, (redis.ConnectionError, redis.TimeoutError))


class OutageTolerantORM(OutageTolerant, ORM):
    """The broker is PostgreSQL itself: the watchdog's probe of PostgreSQL is the broker's."""

    @staticmethod
    def unreachable(error: Exception) -> bool:
        return is_postgresql_outage(error)
