"""The gate between the workers' operations and a quiet sample (the Redis and NOTIFY eras)."""

import threading
from contextlib import contextmanager

from simulator.stopping import RunFailed

# How long a worker may wait for a quiet sample to end, and a quiet sample for the operations
# under way to end: far past the longest of either (a last reseed waits out an in-flight TTL or
# two), so only a stuck thread reaches it.
GATE_SECONDS = 30.0


class Gate:
    """Lets the reconciler take a quiet sample: while it holds `quiet()`, no booking, release,
    flip or limit change is under way, so every operation that started has both halves
    done (or its holder crashed, which leaves Redis high), and Redis must read at least
    SUM(proc) for every managed key. Anything lower is really low. Neither side waits past
    GATE_SECONDS: RunFailed."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._active = 0
        self._quiet = False

    @contextmanager
    def operation(self):
        with self._changed:
            if not self._changed.wait_for(lambda: not self._quiet, timeout=GATE_SECONDS):
                raise RunFailed(f"a quiet sample held the workers for more than {GATE_SECONDS:g} s")
            self._active += 1
        try:
            yield
        finally:
            with self._changed:
                self._active -= 1
                self._changed.notify_all()

    @contextmanager
    def quiet(self):
        with self._changed:
            self._quiet = True
            if not self._changed.wait_for(lambda: self._active == 0, timeout=GATE_SECONDS):
                self._quiet = False
                self._changed.notify_all()
                raise RunFailed(f"an operation of the workers did not end within {GATE_SECONDS:g} s")
        try:
            yield
        finally:
            with self._changed:
                self._quiet = False
                self._changed.notify_all()
