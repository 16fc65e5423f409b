"""A real PostgreSQL primary and a hot standby streaming from it, for the tests that read Cuebot's
tables from a standby (CUEBOT_DATABASE_URL).

Each is a cluster of its own under a temporary directory, on a free loopback port: the primary
initdb'd with pg_stat_statements loaded (its counters say which role ran what), the standby
cloned from it by `pg_basebackup -R` (streaming replication, hot standby). Replay is awaited by
comparing the standby's replayed WAL position with the primary's current one, never by a sleep.
Run as the postgres OS user when the suite runs as root (PostgreSQL refuses root).
"""

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from scripts.services import as_postgres_user
from tests.redis_topology import free_port

BIN = Path("/usr/lib/postgresql/15/bin")
CUEBOT_DB = "cuebot"
# Settings of both clusters: fast and small (nothing here must survive a crash), and the standby's
# conflicts resolved at once (max_standby_streaming_delay 0, no feedback): a read that replay must
# cancel is cancelled, as on a site that leaves the defaults low.
CONFIG = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
fsync = off
full_page_writes = off
shared_buffers = 16MB
max_connections = 30
wal_level = replica
max_wal_senders = 4
shared_preload_libraries = 'pg_stat_statements'
hot_standby = on
hot_standby_feedback = off
max_standby_streaming_delay = 0
"""


def _run(*command: str) -> None:
    subprocess.run(as_postgres_user([str(BIN / command[0]), *command[1:]]), check=True, capture_output=True)


@dataclass
class Cluster:
    data: Path
    port: int

    def url(self, *, role: str = "postgres", database: str = CUEBOT_DB) -> str:
        return f"postgres://{role}@127.0.0.1:{self.port}/{database}"

    def connect(self, *, database: str = CUEBOT_DB, autocommit: bool = True) -> psycopg.Connection:
        return psycopg.connect(self.url(database=database), autocommit=autocommit)

    def start(self) -> None:
        _run("pg_ctl", "-D", str(self.data), "-l", str(self.data / "log"), "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stopped, if it runs."""
        if (self.data / "postmaster.pid").exists():
            _run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")


@dataclass
class Replication:
    root: Path
    primary: Cluster
    standby: Cluster

    def stop(self) -> None:
        """Both clusters stopped and their directory removed."""
        for cluster in (self.standby, self.primary):
            cluster.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def lsn(self) -> str:
        with self.primary.connect(database="postgres") as conn:
            return conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]

    def await_replay(self, *, timeout: float = 20.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        target = self.lsn()
        deadline = time.monotonic() + timeout
        with self.standby.connect(database="postgres") as conn:
            while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]).fetchone()[0]:
                assert time.monotonic() < deadline, f"the standby never replayed {target}"
                time.sleep(0.01)


def _config(cluster: Cluster, root: Path) -> None:
    with open(cluster.data / "postgresql.conf", "a") as conf:
        conf.write(CONFIG.format(port=cluster.port, sockets=root))


def start_replication() -> Replication:
    """A primary with a database `cuebot` and a hot standby of it, both running, under a directory
    of their own in /tmp (one the postgres OS user can reach: pytest's are its runner's alone).
    Whatever fails on the way stops what had started and removes the directory."""
    root = Path(tempfile.mkdtemp(prefix="cuebot-acct-standby-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    replication = Replication(
        root=root,
        primary=Cluster(data=root / "primary", port=free_port()),
        standby=Cluster(data=root / "standby", port=free_port()),
    )
    try:
        _start(replication)
    except BaseException:
        replication.stop()
        raise
    return replication


def _start(replication: Replication) -> None:
    primary, standby = replication.primary, replication.standby
    _run("initdb", "-D", str(primary.data), "-U", "postgres", "-A", "trust", "--no-sync")
    _config(primary, replication.root)
    primary.start()
    with primary.connect(database="postgres") as conn:
        conn.execute(f"CREATE DATABASE {CUEBOT_DB}")
    with primary.connect() as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    # -c fast: a checkpoint at once, not the primary's spread one (minutes).
    backup = ["-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres", "-D", str(standby.data), "-R", "-c", "fast"]
    _run("pg_basebackup", *backup)
    with open(standby.data / "postgresql.conf", "a") as conf:
        conf.write(f"port = {standby.port}\n")
    standby.start()
    replication.await_replay()
