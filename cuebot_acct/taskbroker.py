"""The task cluster's Redis broker (django-q2's, through the django-redis "broker" cache), made
quiet and prompt while Redis is down.

django-q2's pusher treats a failed dequeue as a dead broker: it logs a traceback, sleeps 10 s
and exits, and the sentinel starts a new pusher, which does the same, for as long as Redis is
down; a SIGTERM meanwhile waits out the sleep. And the cluster's status key, written every
half second, logs one error per write. Whether the cluster should go on at all is decided in
one place, the watchdog of `cuebot_acct.taskcluster`, which names the outage in one line and
stops the cluster when it lasts. So here a dequeue that cannot reach Redis waits a moment and
returns nothing (the pusher then checks its stop event, as after an empty queue), and a status
write that cannot reach Redis is skipped (the key lives 3 s and only feeds `qmonitor`).
Anything else fails as django-q2 would have it fail.
"""

import logging
import threading

import redis
from django_q.brokers.redis_broker import Redis

logger = logging.getLogger(__name__)

# How long a dequeue waits after Redis refused it: django-q2's own blocking pop waits 1 s on
# an empty queue, so the pusher looks at its stop event as often as it does when idle.
RETRY_PAUSE_SECONDS = 1.0


class OutageTolerantRedis(Redis):
    def __init__(self, list_key: str | None = None):
        super().__init__(list_key=list_key)
        self._pause = threading.Event()  # never set: wait() is an interruptible sleep
        self._down = False

    def dequeue(self):
        try:
            tasks = super().dequeue()
        except (redis.ConnectionError, redis.TimeoutError) as error:
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
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # a monitoring key with a 3 s life; the watchdog reports the outage itself
