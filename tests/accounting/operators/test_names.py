"""The release answers' names kept per worker (accounting.operators.names): a minute each, and at
most NAMES_KEPT of them, whatever the number of jobs the farm has ever run (issue 49)."""

import uuid

import pytest

from accounting.operators import names

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch):
    """The memo's own clock, moved by the test; the memo starts empty."""
    now = [1000.0]
    monkeypatch.setattr(names, "_clock", lambda: now[0])
    monkeypatch.setattr(names, "_names", type(names._names)())
    return now


def test_a_worker_naming_far_more_jobs_than_its_bound_keeps_at_most_its_bound(clock):
    bound = names.NAMES_KEPT
    for _ in range(3 * bound // 500):  # releases of 500 jobs a minute apart at most: none expire
        jobs = [("job", str(uuid.uuid4())) for _ in range(500)]
        assert set(names.names_of(wanted=jobs).values()) == {"gone"}
        assert len(names._names) <= bound
        clock[0] += 0.1
    assert len(names._names) == bound
    # The newest are those kept: the last job named is served from the memo, without a query.
    assert names._names[jobs[-1]][1] == "gone" and jobs[0] in names._names


def test_names_are_kept_a_minute_and_dropped_after_it(clock, django_assert_num_queries):
    farm_jobs = [("job", str(uuid.uuid4())) for _ in range(100)]
    names.names_of(wanted=farm_jobs)
    with django_assert_num_queries(0):
        names.names_of(wanted=farm_jobs)
    clock[0] += names.NAME_SECONDS
    names.names_of(wanted=[("job", "another")])  # a miss drops what its minute has passed
    assert list(names._names) == [("job", "another")]
