"""Run the project's own commands as a separate process, as an operator would, and put a cuttable
relay between such a process and a real server, to take the server away from it alone."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(*args: str, settings: str = "settings", **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": settings, **env}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


def await_log_line(path: Path, text: str, *, seconds: float = 60) -> None:
    """Until `text` appears in the log file `path` (the event), or fail after `seconds`: a
    process started in the background (scripts/server.py) says what it does only there."""
    deadline = time.monotonic() + seconds
    while text not in (path.read_text(errors="replace") if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.05)


class Running:
    """A project command running in the background, its stderr read line by line as it comes,
    so that a test awaits what the process says instead of sleeping. It leads a process group
    of its own (as under `make run`), so what it started can be found after it has gone."""

    def __init__(self, args: list[str], *, env: dict[str, str]):
        self.process = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._closed = False  # stderr has ended: the process said all it will say
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def await_line(self, text: str, *, seconds: float = 60) -> str:
        """The first stderr line containing `text`, once it has been written."""

        def found() -> str | None:
            return next((line for line in self.lines if text in line), None)

        with self._changed:
            # Ends early if the process closed its stderr (it has ended) without saying it.
            self._changed.wait_for(lambda: found() is not None or self._closed, timeout=seconds)
            line = found()
        assert line is not None, f"{text!r} never appeared on stderr; it said:\n" + "\n".join(self.lines)
        return line

    def wait(self, *, seconds: float) -> int:
        """The exit status, once the process has ended and all it said has been read."""
        status = self.process.wait(timeout=seconds)
        self._reader.join(10)
        return status

    def stop(self) -> None:
        """Kill whatever of its process group is left (a failing test must leave nothing running)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)
        self._reader.join(10)


class TcpProxy:
    """A loopback TCP relay to a real server that the test can cut, as a network partition or a
    stopped server would: `cut()` closes every relayed connection and stops listening, so that
    new connections are refused. PostgreSQL itself is never stopped (other tests share it)."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._cut.is_set():
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                return
            with self._lock:
                if self._cut.is_set():
                    client.close()
                    server.close()
                    return
                self.sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self._cut.set()
        self.listener.close()
        with self._lock:
            for end in self.sockets:
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                end.close()
