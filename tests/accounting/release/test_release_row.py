"""The releasing statements and the pre-reads return one row, named once (ROW_SOURCES), whose
columns line up with Release's fields: a column moved in the definition moves in every SELECT."""

import re

import pytest

from accounting.release.rows import ROW
from accounting.release.statements import PRE_READ_MANY, PRE_READ_ONE, RELEASE_MANY, RELEASE_ONE
from accounting.release.types import Release


@pytest.mark.parametrize(
    "statement",
    [RELEASE_ONE, RELEASE_MANY, PRE_READ_ONE, PRE_READ_MANY],
    ids=["RELEASE_ONE", "RELEASE_MANY", "PRE_READ_ONE", "PRE_READ_MANY"],
)
def test_every_statement_returns_the_row_in_its_order(statement):
    last_select = statement[statement.rindex("\nSELECT ") :]
    assert tuple(re.findall(r" AS (\w+)", last_select)) == ROW


def test_the_row_is_releases_fields_but_the_derived_two_then_what_the_path_reads():
    assert [name for name in Release._fields if name not in ("cores", "branch")] + ["is_local", "inserted_by"] == list(
        ROW
    )
