"""`manage.py acct_listen`: what the scheduler hears, printed with names, as it arrives."""

import io
import json
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections

from accounting.limits.changes import set_folder_limits
from accounting.notify.payloads import RELEASE
from accounting.release.unbook import unbook_proc
from tests.farms import build_farm

pytestmark = pytest.mark.usefixtures("notify_on")


class Announcing(io.StringIO):
    """stderr that tells the test when the command is listening."""

    def __init__(self):
        super().__init__()
        self.listening = threading.Event()

    def write(self, text: str) -> int:
        if "listening on" in text:
            self.listening.set()
        return super().write(text)


def listen_in_background(*args: str) -> tuple[threading.Thread, io.StringIO]:
    out, err = io.StringIO(), Announcing()

    def run() -> None:
        try:
            call_command("acct_listen", *args, stdout=out, stderr=err)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    assert err.listening.wait(10), err.getvalue()
    return thread, out


@pytest.mark.django_db(transaction=True)
def test_it_prints_each_notification_with_names():
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=250, gpus=1)
    thread, out = listen_in_background("--count", "2", "--seconds", "20")
    unbook_proc(proc_id=proc.id)
    set_folder_limits(folder_resource=farm.folder_resource, max_cores=-1)
    thread.join()
    assert out.getvalue().splitlines() == [
        f"release {farm.show.str_name} / {farm.alloc.str_name}, folder root, job {farm.job.str_name}, layer render, "
        f"dept {farm.dept.str_name}: cores -2, GPUs -1",
        "limit folder root: max_cores unlimited",
    ]


@pytest.mark.django_db(transaction=True)
def test_json_keeps_ids_beside_names_and_names_what_the_scheduler_would_drop():
    thread, out = listen_in_background("--json", "--count", "1", "--seconds", "20", "--channel", RELEASE)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [RELEASE, '{"show":"nope"}'])
    thread.join()
    line = json.loads(out.getvalue())
    assert line["channel"] == RELEASE and line["problem"] == "show is not a UUID: 'nope'"


def test_a_count_below_one_is_refused(db):
    with pytest.raises(CommandError, match="--count must be 1 or more"):
        call_command("acct_listen", "--count", "0")
