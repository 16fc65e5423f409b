"""A list's count read from PostgreSQL's own estimate where counting would scan a table that
grows with the farm's work (proc, frame: a row per running frame), said to be an estimate.

The admin counts a list's rows for its pagination: `SELECT count(*)` reads every row, so on a
studio's farm (200,000 procs) the count of the unfiltered list alone costs more than the page it
numbers, and more every day the farm grows. PostgreSQL keeps each table's row count as of its
last VACUUM or ANALYZE (`pg_class.reltuples`, over `relpages` pages); scaled to the table's pages
now, as the planner scales it, it is what the planner itself believes. That estimate numbers an
unfiltered list of at least ESTIMATED_FROM rows, and the list says "about" (the pagination
template, admin/accounting/_estimated_pagination.html). A filtered or searched list, a smaller
table and a table never analyzed are counted exactly: a filter narrows the count to what the
filter's index finds, and an estimate of no statistics would be a guess.

With an estimate, the page links run from the first page to a few past the current one, never
to a "last page" the estimate would only guess at (and which an OFFSET of the whole table would
make the slowest page of all); a page past the real end is refused as any page out of range is.
"""

from functools import cached_property
from typing import cast

from django.contrib.admin.views.main import ChangeList
from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db import connections
from django.db.models import QuerySet

# Below this many rows an exact count costs a few milliseconds: it is made.
ESTIMATED_FROM = 100_000

# The planner's own arithmetic: rows per page at the last VACUUM or ANALYZE, times the pages the
# table has now. NULL where the table was never vacuumed or analyzed (reltuples -1 since
# PostgreSQL 14) or is not known by that name.
_ESTIMATE = """
SELECT CASE WHEN c.reltuples < 0 THEN NULL
            WHEN c.relpages = 0 THEN c.reltuples
            ELSE c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::int)
       END
  FROM pg_class c WHERE c.oid = to_regclass(%s)
"""


def estimated_rows(*, model, using: str = "default") -> int | None:
    """PostgreSQL's estimate of `model`'s table's rows now; None where it has none."""
    with connections[using].cursor() as cursor:
        cursor.execute(_ESTIMATE, [connections[using].ops.quote_name(model._meta.db_table)])
        row = cursor.fetchone()
    return None if row is None or row[0] is None else round(row[0])


class EstimatedCountPaginator(Paginator):
    """The admin's paginator, counting an unfiltered list of a large table by PostgreSQL's estimate."""

    @cached_property
    def counted(self) -> tuple[int, bool]:
        """The list's count, and whether it is PostgreSQL's estimate."""
        queryset = cast(QuerySet, self.object_list)  # the admin pages a queryset
        if not queryset.query.where:
            estimate = estimated_rows(model=queryset.model, using=queryset.db)
            if estimate is not None and estimate >= ESTIMATED_FROM:
                return estimate, True
        return super().count, False

    @property
    def count(self) -> int:
        return self.counted[0]

    @property
    def estimated(self) -> bool:
        return self.counted[1]

    def validate_number(self, number) -> int:
        if not self.estimated:
            return super().validate_number(number)
        # Rows may go on past the estimate's last page: page() finds out.
        try:
            number = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger("That page number is not an integer") from None
        if number < 1:
            raise EmptyPage("That page number is less than 1")
        return number

    def page(self, number) -> Page:
        if not self.estimated:
            return super().page(number)
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        rows = self.object_list[bottom : bottom + self.per_page]
        if number > 1 and not rows:
            raise EmptyPage("That page contains no results")
        return Page(rows, number, self)

    def get_elided_page_range(self, number=1, *, on_each_side=3, on_ends=2):
        """With an estimate: the first pages, the current one and a few past it, then an
        ellipsis; no last page."""
        if not self.estimated:
            yield from super().get_elided_page_range(number, on_each_side=on_each_side, on_ends=on_ends)
            return
        number = self.validate_number(number)
        start = number - on_each_side
        if start > on_ends + 1:
            yield from range(1, on_ends + 1)
            yield self.ELLIPSIS
        else:
            start = 1
        yield from range(start, max(number, min(number + on_each_side, self.num_pages)) + 1)
        yield self.ELLIPSIS


class EstimatedCountChangeList(ChangeList):
    """The list page of a model admin numbered by EstimatedCountPaginator, which counts no whole
    table beside a filtered list (show_full_result_count off). The admin's search bar then says
    "N results (Show all)" of an unfiltered list too: the estimate as if counted, and a link to
    the list shown. Unfiltered, nothing narrows it and the bar says nothing (the pagination says
    the count, and what it is); filtered, "N results (Show all)", N counted exactly."""

    def get_results(self, request) -> None:
        super().get_results(request)
        if self.full_result_count is None and not self.queryset.query.where:
            self.full_result_count = self.result_count
