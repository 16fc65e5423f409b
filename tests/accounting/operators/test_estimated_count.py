"""The proc and frame lists numbered by PostgreSQL's estimate where a count would read a table that
grows with the farm's work, said to be one; counted exactly filtered, or below the size where an
estimate starts (accounting.operators.estimated_count)."""

import re

import pytest
from django.core.paginator import EmptyPage
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounting.models import Proc
from accounting.operators import estimated_count
from accounting.operators.estimated_count import EstimatedCountPaginator, estimated_rows
from tests.accounting.operators.test_admin_overview import visible_text
from tests.farms import build_farm
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db

LISTS = {"proc": "admin:accounting_proc_changelist", "frame": "admin:shows_frame_changelist"}


@as_cuebot()
def analyze(table: str) -> None:
    """What autovacuum does at a site: the table's row count in pg_class (Cuebot's tables are
    analyzed by their owner; the tests' role is not)."""
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")


@pytest.fixture
def five_procs():
    farm = build_farm(managed=False)
    for _ in range(5):
        farm.add_proc(cores=100)
    analyze("proc")
    analyze("frame")
    return farm


def counts_of(queries, table: str) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].startswith("SELECT COUNT(*)") and f'FROM "{table}"' in q["sql"]]


@pytest.mark.parametrize("table", LISTS)
def test_an_unfiltered_list_of_a_large_table_says_it_is_numbered_by_postgresqls_estimate(
    table, five_procs, admin_client, monkeypatch
):
    monkeypatch.setattr(estimated_count, "ESTIMATED_FROM", 5)  # five rows make this table "large"
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(reverse(LISTS[table]))
    text = visible_text(page.content.decode())
    assert f"about 5 {table}s (PostgreSQL's estimate of the table's rows" in text
    assert counts_of(queries, table) == []  # no count read the table
    assert "5 results" not in text  # nor the search bar says it counted them


@pytest.mark.parametrize("table", LISTS)
def test_a_filtered_list_and_a_small_table_are_counted_exactly(table, five_procs, admin_client, monkeypatch):
    build_farm(managed=False)  # a second show: with one, the admin offers (and applies) no show filter
    show = f"?{'show' if table == 'proc' else 'job__show'}__id__exact={five_procs.show.id}"
    monkeypatch.setattr(estimated_count, "ESTIMATED_FROM", 5)
    with CaptureQueriesContext(connection) as queries:
        filtered = visible_text(admin_client.get(reverse(LISTS[table]) + show).content.decode())
    assert len(counts_of(queries, table)) == 1  # the filtered list's, and none of the whole table
    monkeypatch.setattr(estimated_count, "ESTIMATED_FROM", 6)
    small = visible_text(admin_client.get(reverse(LISTS[table])).content.decode())
    for text in (filtered, small):
        assert f"5 {table}s" in text and "about" not in text and "estimate" not in text
    assert re.search(r"5 results \( ?Show all ?\)", filtered)  # the admin's own words of a filtered list


def test_the_estimate_is_the_planners_and_none_without_statistics(five_procs):
    assert estimated_rows(model=Proc) == 5
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute("CREATE TABLE never_analyzed (id int)")
        cursor.execute("INSERT INTO never_analyzed SELECT generate_series(1, 3)")

    class NeverAnalyzed:
        class _meta:
            db_table = "never_analyzed"

    assert estimated_rows(model=NeverAnalyzed) is None


def test_with_an_estimate_the_pages_run_past_it_and_no_last_page_is_guessed(five_procs, monkeypatch):
    monkeypatch.setattr(estimated_count, "ESTIMATED_FROM", 1)
    monkeypatch.setattr(estimated_count, "estimated_rows", lambda **_: 3)  # an estimate that lags the table
    paginator = EstimatedCountPaginator(Proc.objects.order_by("pk"), 2)
    assert (paginator.count, paginator.estimated, paginator.num_pages) == (3, True, 2)
    assert list(paginator.get_elided_page_range(1)) == [1, 2, EstimatedCountPaginator.ELLIPSIS]
    assert len(paginator.page(3).object_list) == 1  # the fifth proc, past the estimate's last page
    with pytest.raises(EmptyPage):
        paginator.page(4)
    assert list(paginator.get_elided_page_range(9)) == [1, 2, "…", 6, 7, 8, 9, "…"]
