"""Private Redis processes for the fault tests: a server, or a Sentinel topology (a master,
replicas, three sentinels), each on loopback ports picked here, in a temporary directory,
and always killed when the block ends, the test failing or not."""

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

MASTER_NAME = "acct-test"


_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port never handed out before in this process: the sentinels of a
    topology still running would take a server that came up on a port they once monitored
    and make it a replica of their own master."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def await_true(check: Callable[[], object], *, timeout: float, what: str, interval: float = 0.05) -> object:
    """Poll `check` until it returns something truthy; AssertionError naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (redis.RedisError, OSError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@dataclass
class RedisProcess:
    port: int
    process: subprocess.Popen
    directory: Path | None = None

    def client(self, **options) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, **options)

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait(10)

    def restart(self) -> None:
        """kill -9, then a new, empty server on the same port (it runs without persistence)."""
        self.kill()
        self.process = _start(_data_args(self.port, self.directory), port=self.port, directory=self.directory).process


def _start(args: list[str], *, port: int, directory: Path) -> RedisProcess:
    log = open(directory / f"redis-{port}.log", "ab")
    process = subprocess.Popen(["redis-server", *args], stdout=log, stderr=subprocess.STDOUT, cwd=directory)
    log.close()
    server = RedisProcess(port=port, process=process, directory=directory)
    try:
        with server.client() as client:
            await_true(client.ping, timeout=10, what=f"redis-server on port {port}")
    except BaseException:
        server.kill()
        raise
    return server


def _data_args(port: int, directory: Path) -> list[str]:
    return ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(directory)]


@contextmanager
def redis_server() -> Iterator[RedisProcess]:
    with tempfile.TemporaryDirectory(prefix="acct-redis-") as directory:
        server = _start(_data_args(port := free_port(), Path(directory)), port=port, directory=Path(directory))
        try:
            yield server
        finally:
            server.kill()


@dataclass
class SentinelTopology:
    master: RedisProcess
    replicas: list[RedisProcess]
    sentinels: list[RedisProcess]
    stopped: list[RedisProcess] = field(default_factory=list)

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}/{db}"

    def master_port(self) -> int:
        with self.sentinels[0].client() as client:
            return int(client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)[1])

    def ready(self) -> bool:
        """Every sentinel sees the master, every replica and the two other sentinels."""
        for sentinel in self.sentinels:
            with sentinel.client(decode_responses=True) as client:
                replicas = client.execute_command("SENTINEL", "REPLICAS", MASTER_NAME)
                others = client.execute_command("SENTINEL", "SENTINELS", MASTER_NAME)
            if len(others) < len(self.sentinels) - 1 or len(replicas) < len(self.replicas):
                return False
            if any("s_down" in _fields(r)["flags"] or _fields(r).get("master-link-status") != "ok" for r in replicas):
                return False
        return True


def _fields(reply) -> dict:
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))


@contextmanager
def sentinel_topology(
    *, replicas: int = 1, down_after_ms: int = 1000, failover_timeout_ms: int = 3000
) -> Iterator[SentinelTopology]:
    """A master, `replicas` replicas and three sentinels (quorum 2), ready to fail over."""
    with tempfile.TemporaryDirectory(prefix="acct-sentinel-") as name, ExitStack() as cleanup:
        directory = Path(name)

        def start(args: list[str], port: int) -> RedisProcess:
            server = _start(args, port=port, directory=directory)
            cleanup.callback(server.kill)
            return server

        master_port = free_port()
        master = start(_data_args(master_port, directory), master_port)
        copies = []
        for _ in range(replicas):
            port = free_port()
            copies.append(start(_data_args(port, directory) + ["--replicaof", "127.0.0.1", str(master_port)], port))
        sentinels = []
        for _ in range(3):
            port = free_port()
            config = directory / f"sentinel-{port}.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}\n"
                f"sentinel failover-timeout {MASTER_NAME} {failover_timeout_ms}\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            sentinels.append(start([str(config), "--sentinel"], port))
        topology = SentinelTopology(master=master, replicas=copies, sentinels=sentinels)
        await_true(topology.ready, timeout=20, what="sentinels to see the replicas and each other", interval=0.2)
        yield topology
