"""How a run ends, however it ends: its threads told to stop and joined against one deadline, and
a run that cannot go on said in one line.

Why it exists: a run whose main thread raised while one of its threads still ran never ended.
The NOTIFY era's scheduler model, never told to stop after its sync gave up, kept the process
alive for ever, and a simulator that can hang hangs CI too. So each era starts its threads in a
`Threads` block, whose end tells them to stop and joins them, whatever ended it; they are daemon
threads, so one stuck past the deadline cannot keep a failed process alive either. Whatever the
main thread waits for has a deadline, past which it raises `RunFailed`: simulate_farm prints its
message as one line and exits 1.
"""

import threading
import time
from collections.abc import Callable
from types import TracebackType

# How long a run's threads, told to stop, may take to end: each finishes the operation it is in
# (a booking, a release, a reseed cycle, which may wait out one in-flight TTL).
STOP_SECONDS = 15.0


class RunFailed(Exception):
    """The run cannot go on (a thread died, stopped answering or did not stop); the message says
    why, in one line."""


class Threads:
    """Threads of a run that stop together: `stop` is set and every thread is joined, against one
    deadline of `seconds`, when the block ends."""

    def __init__(self, *, stop: threading.Event, seconds: float = STOP_SECONDS) -> None:
        self.stop, self.seconds = stop, seconds
        self.threads: list[threading.Thread] = []

    def start(self, target: Callable[..., None], *args: object, name: str, **kwargs: object) -> None:
        thread = threading.Thread(target=target, args=args, kwargs=kwargs, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def __enter__(self) -> "Threads":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop.set()
        deadline = time.monotonic() + self.seconds
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [thread.name for thread in self.threads if thread.is_alive()]
        # A run that failed already says why; its stuck threads end with the process.
        if stuck and error is None:
            raise RunFailed(f"{', '.join(stuck)} did not stop within {self.seconds:g} s of being told to")
