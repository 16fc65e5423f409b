"""The lists of the tables that grow with the farm's work (proc, frame) offer only orderings an
index of Cuebot's serves, a page read at a time: a sort by anything else reads and sorts every
row of the farm to draw the first hundred. A page's queries do not grow with its rows, and the
frame list's state filter reads no frame to offer its states. Their searches match names in the
names' own tables, then the rows by an index on the ids found."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounting.operators import name_search
from shows.models import Host
from tests.farms import build_farm
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db

LISTS = ["admin:accounting_proc_changelist", "admin:shows_frame_changelist"]


def sorted_whole(queryset) -> list[str]:
    """The plan's sorts of every row read (a Sort node; an Incremental Sort only orders within
    groups an index already ordered), the planner told to avoid sorting wherever an index can
    order instead: a small test table would otherwise be sorted whole, cheaply."""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_sort = off")
    try:
        plan = queryset[:100].explain()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET enable_sort")
    return [line for line in plan.splitlines() if re.match(r"\s*(->\s*)?Sort\s+\(", line)]


def offered_orderings(admin_client, url: str) -> dict[str, object]:
    """Each ordering the list offers (its default, and each sortable column either way): its queryset."""
    changelist = admin_client.get(url).context["cl"]
    found = {"default": changelist.queryset}
    for i, name in enumerate(changelist.list_display):
        if name != "action_checkbox" and name in changelist.sortable_by:
            for sign in ("", "-"):
                found[f"{sign}{name}"] = admin_client.get(f"{url}?o={sign}{i}").context["cl"].queryset
    return found


@pytest.mark.parametrize("name", LISTS)
def test_every_ordering_offered_is_served_by_an_index(name, admin_client):
    farm = build_farm(managed=False)
    farm.add_proc(cores=100)
    url = reverse(name)
    orderings = offered_orderings(admin_client, url)
    assert len(orderings) >= 3  # the default and one column at least, both ways
    assert {label: sorted_whole(queryset) for label, queryset in orderings.items()} == {
        label: [] for label in orderings
    }


def test_the_proc_lists_queries_do_not_grow_with_its_procs(admin_client):
    farm = build_farm(managed=False)
    farm.add_proc(cores=100)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(reverse(LISTS[0])).status_code == 200
        return len(captured)

    one = queries()
    for _ in range(4):
        farm.add_job()
        farm.add_proc(cores=100, layer=farm.add_job()[1])
    assert queries() == one


def test_the_frame_state_filter_offers_cuebots_states_without_reading_the_frames(admin_client):
    farm = build_farm(managed=False)
    farm.add_proc(cores=100)  # a running frame
    waiting = farm.add_frame(state="WAITING")
    with CaptureQueriesContext(connection) as captured:
        page = admin_client.get(reverse(LISTS[1]))
    assert not [q["sql"] for q in captured if "DISTINCT" in q["sql"] and '"frame"' in q["sql"]]
    choices = [choice["display"] for choice in page.context["cl"].filter_specs[-1].choices(page.context["cl"])]
    assert choices == ["All", "waiting", "setup", "running", "succeeded", "depend", "dead", "eaten", "checkpoint"]
    listed = admin_client.get(reverse(LISTS[1]), {"str_state": "WAITING"}).context["cl"].result_list
    assert [frame.pk for frame in listed] == [waiting.pk]


@pytest.fixture
def two_jobs_on_two_hosts():
    farm = build_farm(managed=False)
    with as_cuebot():
        other_host = Host.objects.create(
            alloc=farm.alloc,
            str_name="render-0042",
            str_lock_state="OPEN",
            **{f"int_{amount}": 6400 for amount in ("cores", "cores_idle", "mem", "mem_idle")},
        )
    first = farm.add_proc(cores=100)
    second = farm.add_proc(cores=100, layer=farm.add_job()[1], host=other_host)
    return farm, first, second


@pytest.mark.parametrize("few", [name_search.FEW, 0])  # a word naming few rows, and one naming many
def test_the_proc_search_matches_names_part_and_ids_whole_without_joining_the_farm(
    few, two_jobs_on_two_hosts, admin_client, monkeypatch
):
    monkeypatch.setattr(name_search, "FEW", few)
    farm, first, second = two_jobs_on_two_hosts

    def found(term: str) -> set[str]:
        with CaptureQueriesContext(connection) as captured:
            listed = admin_client.get(reverse(LISTS[0]), {"q": term}).context["cl"].result_list
        (count,) = [q["sql"] for q in captured if q["sql"].startswith('SELECT COUNT(*) AS "__count" FROM "proc"')]
        assert " JOIN " not in count  # the procs found by their own columns, no name compared per proc
        return {proc.pk for proc in listed}

    assert found("0042") == {second.pk}  # part of a host's name
    assert found(farm.job.str_name.upper()) == {first.pk}  # a job's name, any case
    assert found(farm.show.str_name) == {first.pk, second.pk}
    assert found(f"{farm.show.str_name} render-0042") == {second.pk}  # every word
    assert found(first.pk) == {first.pk} and found(first.pk[:8]) == set()  # an id whole, not a part


def test_the_frame_search_matches_a_job_name_without_joining_the_frames(two_jobs_on_two_hosts, admin_client):
    farm, first, _ = two_jobs_on_two_hosts
    with CaptureQueriesContext(connection) as captured:
        listed = admin_client.get(reverse(LISTS[1]), {"q": farm.job.str_name}).context["cl"].result_list
    (count,) = [q["sql"] for q in captured if q["sql"].startswith('SELECT COUNT(*) AS "__count" FROM "frame"')]
    assert " JOIN " not in count
    assert [frame.pk for frame in listed] == [first.frame_id]
