"""The web server's command line as deployed, in one place: `scripts/server.py` starts it, and
the farm simulator's HTTP releases go through the very same server (the simulator package, simulator/)."""

CONFIG = ["--config", "python:cuebot_acct.gunicorn_conf"]


def gunicorn_args(*, bind: str) -> list[str]:
    """gunicorn's arguments after the program name: the package's configuration (its start-up check),
    the WSGI app, two workers of four threads. Nothing of it is read from the working directory, so an
    installed wheel serves from anywhere."""
    return [*CONFIG, "cuebot_acct.wsgi", "--bind", bind, "--workers", "2", "--threads", "4"]
