"""The proc and frame lists' search at a studio's size: each name a word may be part of is
matched in its own table first, then the rows of the list by an index on those ids.

The admin's own search compares every searched field of every row: for a proc's host, job and
show names it joins every proc of the farm to the three tables (a row per running frame, 200,000
on a studio's farm: 0.7 s a search, its count as much again). Hosts, jobs and shows are a few
thousand rows each; the ids of those whose name holds the word are few for any word a person
types to find something (a host's or a job's name, or part of it), and proc's indexes on its host,
job and show find their procs at once. A word most names hold ("demo") matches most of the
farm anyway: past FEW ids the list is filtered by the name's query instead, and PostgreSQL reads
the list whole, as it must.
"""

from django.db.models import Model, QuerySet
from django.utils.text import smart_split, unescape_string_literal

# More ids than this and a word is common: its query filters the list, not a list of ids.
FEW = 1000


def words(search_term: str) -> list[str]:
    """The words of a search as the admin splits them: at spaces, a quoted phrase whole."""
    return [
        unescape_string_literal(word) if word[0] in "\"'" and word[0] == word[-1] else word
        for word in smart_split(search_term)
    ]


def named_like(*, model: type[Model], word: str) -> list | QuerySet:
    """The keys of `model`'s rows whose `str_name` holds `word` (any case): a list when few, else
    the query that finds them."""
    matching = model._default_manager.filter(str_name__icontains=word).values_list("pk", flat=True)
    ids = list(matching[: FEW + 1])
    return ids if len(ids) <= FEW else matching
