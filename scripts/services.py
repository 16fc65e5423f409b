#!/usr/bin/env python
"""Bring PostgreSQL and Redis up for cuebot-acct, or take down what this script started.

`up`: for every URL the settings name (DATABASE_URL and the Redis URLs the era uses), use the
server if it answers; otherwise start a project-local one under .local/ (PostgreSQL from the
installed binaries, run as the postgres user when we are root; Redis without persistence).
Then make sure the database exists. `up --tests`: the same servers, but no database is
created (pytest-django creates and drops its own test_<name>), and promtool, Chromium and its
chromedriver must be there (the alert-rule tests run promtool; the admin's browser test drives
headless Chromium through Selenium and chromedriver). `down` (what `make stop` runs): stop
everything `up` started (recorded under .local/started/).

`with [--tests] -- COMMAND...` (what `make test` and so CI run): `up`, then COMMAND, then
stop exactly the servers this `up` started, whatever COMMAND's outcome (an interrupt
included), and exit with COMMAND's status. Servers that already answered, a `make run`'s
included, are left running.

A missing distribution package (postgresql, redis-server, prometheus for promtool, chromium,
chromium-driver) is never installed quietly: as root, it is named with the reason and
installed with apt-get's own output shown, then said to be installed; otherwise the script
stops, naming the package and the command that installs it.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / ".local"
STARTED = LOCAL / "started"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}


def say(message: str) -> None:
    print(f"services: {message}", flush=True)


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host or "127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def wait_until_answers(host: str, port: int, *, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not answers(host, port):
        if time.monotonic() > deadline:
            sys.exit(f"services: {what} on {host}:{port} did not come up; see .local/log/")
        time.sleep(0.2)


def as_postgres_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def apt_install(package: str, *, why: str, recommends: bool = True) -> None:
    """Install a Debian package, loudly: what, why and how before, apt-get's own output during,
    the result after. Never as anyone but root (the command to run is named instead)."""
    command = ["apt-get", "install", "-y", *([] if recommends else ["--no-install-recommends"]), package]
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        sys.exit(f"services: {package} is missing ({why}); install it (sudo {' '.join(command)}) and run again")
    say(f"{package} is missing ({why}); installing it now: apt-get update && {' '.join(command)}")
    subprocess.run(["apt-get", "update"], check=True)
    subprocess.run(command, check=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    say(f"installed {package} (apt-get remove {package} takes it away)")


def ensure_promtool() -> None:
    """promtool ships in Debian's prometheus package, with the Prometheus server, whose service the
    package enables: the suite runs promtool and a server of its own (on a free port, for the
    Grafana dashboard's queries), never the service, so that is stopped and disabled again."""
    if shutil.which("promtool") and shutil.which("prometheus"):
        return
    apt_install(
        "prometheus",
        why="its promtool checks the alert rules and its server runs the Grafana dashboard's queries in the suite",
        recommends=False,
    )
    if shutil.which("systemctl"):
        subprocess.run(
            ["systemctl", "disable", "--now", "prometheus"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        say("stopped and disabled the Prometheus service the package enabled (the suite starts its own)")
    if not (shutil.which("promtool") and shutil.which("prometheus")):
        sys.exit("services: the prometheus package did not install promtool and prometheus")


def ensure_chromium() -> None:
    """The suite's browser test (tests/accounting/operators/test_admin_in_chromium.py) loads the
    admin in headless Chromium, as scripts/screenshots.py does, both through Selenium, which
    speaks WebDriver to Debian's chromedriver: the chromium package has the browser (installed
    with its recommended packages, for the fonts a page's text is drawn with), chromium-driver
    the driver of that same Chromium release."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from screenshots import CHROMEDRIVER, find_browser

    if not find_browser():
        apt_install("chromium", why="the suite's browser test loads the admin in headless Chromium")
        if not find_browser():
            sys.exit("services: the chromium package did not install a chromium binary")
    if not CHROMEDRIVER.is_file():
        apt_install("chromium-driver", why=f"Selenium drives Chromium through its {CHROMEDRIVER} in the browser test")
        if not CHROMEDRIVER.is_file():
            sys.exit(f"services: the chromium-driver package did not install {CHROMEDRIVER}")


def postgres_bin_dir() -> Path:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if not candidates:
        apt_install("postgresql", why="no PostgreSQL answers where DATABASE_URL points, and none is installed to start")
        return postgres_bin_dir()
    return candidates[-1].parent


def start_postgres(*, host: str, port: int, user: str) -> None:
    bin_dir = postgres_bin_dir()
    base = LOCAL / "postgres"
    data, run_dir = base / "data", base / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    (LOCAL / "log").mkdir(parents=True, exist_ok=True)
    log = LOCAL / "log" / "postgres.log"
    log.touch()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(run_dir, "postgres")
        shutil.chown(log, "postgres")
    if not (data / "PG_VERSION").exists():
        say(f"initialising a project-local PostgreSQL in {data}")
        subprocess.run(
            as_postgres_user([str(bin_dir / "initdb"), "-D", str(data), "-U", user, "-A", "trust", "-E", "UTF8"]),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    options = f"-p {port} -k {run_dir} -c listen_addresses={host or '127.0.0.1'}"
    say(f"starting PostgreSQL on {host}:{port}")
    subprocess.run(
        as_postgres_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (STARTED / "postgres").write_text(str(bin_dir))


def ensure_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            say(f"creating database {name}")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def postgres_up(url: str, *, create_database: bool) -> bool:
    """True if this call started the project-local PostgreSQL."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    started = False
    if answers(host, port):
        say(f"PostgreSQL answers on {host}:{port}")
    elif host in LOCAL_HOSTS:
        start_postgres(host=host, port=port, user=parts.username or "postgres")
        wait_until_answers(host, port, what="PostgreSQL")
        started = True
    else:
        sys.exit(
            f"services: PostgreSQL at {host}:{port} does not answer and is not local; start it or set DATABASE_URL"
        )
    if create_database:
        ensure_database(url)
    return started


def redis_up(host: str, port: int) -> Path | None:
    """The pid file of the Redis this call started, None if one already answered."""
    if answers(host, port):
        say(f"Redis answers on {host}:{port}")
        return None
    if host not in LOCAL_HOSTS:
        sys.exit(f"services: Redis at {host}:{port} does not answer and is not local; start it or set the Redis URLs")
    if shutil.which("redis-server") is None:
        apt_install("redis-server", why=f"no Redis answers on {host}:{port}, and none is installed to start")
    work = LOCAL / "redis"
    work.mkdir(parents=True, exist_ok=True)
    (LOCAL / "log").mkdir(parents=True, exist_ok=True)
    pidfile = STARTED / f"redis-{port}.pid"
    say(f"starting Redis on {host}:{port} (no persistence)")
    subprocess.run(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            host or "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "yes",
            "--pidfile",
            str(pidfile),
            "--dir",
            str(work),
            "--logfile",
            str(LOCAL / "log" / f"redis-{port}.log"),
        ],
        check=True,
    )
    wait_until_answers(host, port, what="Redis")
    return pidfile


def configured_urls() -> tuple[str, list[str]]:
    """DATABASE_URL and the Redis URLs the settings set (none in the Maestro era without one)."""
    sys.path.insert(0, str(ROOT))
    module = os.environ.get("DJANGO_SETTINGS_MODULE", "settings")
    settings = __import__(module, fromlist=["*"])
    redis_urls = [settings.ACCOUNTING_REDIS_URL, settings.CACHE_REDIS_URL, settings.TASK_BROKER_REDIS_URL]
    return settings.DATABASE_URL, [url for url in redis_urls if url]


def up(*, tests: bool = False) -> list[str]:
    """Bring the servers up; the names (under .local/started/) of those this call started."""
    STARTED.mkdir(parents=True, exist_ok=True)
    database_url, redis_urls = configured_urls()
    started = ["postgres"] if postgres_up(database_url, create_database=not tests) else []
    # A Sentinel URL names a topology the site runs; only plain URLs get a local Redis.
    plain = [u for u in redis_urls if not u.startswith("redis+sentinel://")]
    for host, port in sorted({(urlsplit(u).hostname or "127.0.0.1", urlsplit(u).port or 6379) for u in plain}):
        pidfile = redis_up(host, port)
        if pidfile is not None:
            started.append(pidfile.name)
    if tests:
        ensure_promtool()
        ensure_chromium()
    return started


def stop(name: str) -> None:
    """Stop one server `up` started and forget it; waits until it is gone, so its port is free."""
    record = STARTED / name
    if name == "postgres":
        bin_dir = Path(record.read_text())
        say("stopping the project-local PostgreSQL")
        subprocess.run(
            as_postgres_user(
                [str(bin_dir / "pg_ctl"), "-D", str(LOCAL / "postgres" / "data"), "-m", "fast", "-w", "stop"]
            ),
            check=False,
            stdout=subprocess.DEVNULL,
        )
    else:
        say(f"stopping the project-local Redis ({record.stem})")
        try:
            pid = int(record.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        except (ProcessLookupError, ValueError, FileNotFoundError):
            pass
    record.unlink(missing_ok=True)


def down() -> None:
    for record in sorted(STARTED.glob("postgres")) + sorted(STARTED.glob("redis-*.pid")):
        stop(record.name)


def run_with_services(command: list[str], *, tests: bool) -> int:
    """`up`, COMMAND, then stop what that `up` started, whatever happened in between."""
    started: list[str] = []
    child: subprocess.Popen | None = None

    def on_terminate(signum, frame):
        # A CI cancel or `kill`: pass it on, then clean up as after any other end of COMMAND.
        if child is not None and child.poll() is None:
            child.send_signal(signum)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_terminate)
    try:
        started = up(tests=tests)
        # Ctrl-C reaches COMMAND (the terminal signals the whole group); this process waits for its end.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        child = subprocess.Popen(command)
        return child.wait()
    finally:
        for name in started:
            stop(name)
        if started:
            say("stopped what this run started; nothing of it is left running")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if arguments == ["up"]:
        up()
    elif arguments == ["up", "--tests"]:
        up(tests=True)
    elif arguments == ["down"]:
        down()
    elif arguments[:1] == ["with"] and "--" in arguments and arguments.index("--") < len(arguments) - 1:
        options, command = arguments[1 : arguments.index("--")], arguments[arguments.index("--") + 1 :]
        if options not in ([], ["--tests"]):
            sys.exit("usage: services.py with [--tests] -- COMMAND...")
        sys.exit(run_with_services(command, tests=options == ["--tests"]))
    else:
        sys.exit("usage: services.py up [--tests] | down | with [--tests] -- COMMAND...")
