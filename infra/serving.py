"""The web server's command line as deployed, in one place: `scripts/server.py` starts it, and
the farm simulator's HTTP releases go through the very same server (the simulator package, simulator/)."""


def gunicorn_args(*, bind: str) -> list[str]:
    """gunicorn's arguments after the program name: the WSGI app, two workers of four threads."""
    return ["cuebot_acct.wsgi", "--bind", bind, "--workers", "2", "--threads", "4"]
