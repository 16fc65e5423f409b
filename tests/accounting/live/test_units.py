import pytest

from accounting.live.units import (
    UNLIMITED,
    centicores_from_cores,
    cores_from_centicores,
    cores_text,
    format_cores,
    parse_cores,
)


@pytest.mark.parametrize(("centicores", "cores"), [(0, 0), (99, 0), (100, 1), (250, 2), (12345, 123)])
def test_centicores_truncate_toward_zero(centicores, cores):
    assert cores_from_centicores(centicores) == cores


def test_unlimited_passes_verbatim_both_ways():
    assert cores_from_centicores(UNLIMITED) == UNLIMITED
    assert centicores_from_cores(UNLIMITED) == UNLIMITED


@pytest.mark.parametrize("bad", [-2, -100])
def test_other_negative_values_are_refused(bad):
    with pytest.raises(ValueError):
        cores_from_centicores(bad)
    with pytest.raises(ValueError):
        centicores_from_cores(bad)


def test_format_cores():
    assert format_cores(250) == "2.5 cores"
    assert format_cores(100) == "1 core"
    assert format_cores(0) == "0 cores"
    assert format_cores(-1) == "unlimited"


INT_MAX = 2**31 - 1


@pytest.mark.parametrize(("centicores", "text"), [(0, "0"), (1, "0.01"), (10, "0.1"), (250, "2.5"), (20000, "200"),
                                                   (12345, "123.45"), (UNLIMITED, "unlimited")])
def test_cores_text_round_trips_exactly(centicores, text):
    assert cores_text(centicores) == text
    assert parse_cores(text, unlimited=True, maximum=INT_MAX) == centicores


@pytest.mark.parametrize(("text", "unlimited", "message"), [
    ("2.125", True, "at most two decimals"),
    ("unlimited", False, "Enter a number of cores such as 4 or 2.5."),
    ("-1", False, "Enter a number"),
    ("-2", True, "Enter a number"),
    (" 7", True, "Enter a number"),
    ("٣", True, "Enter a number"),
    ("1e3", True, "Enter a number"),
    ("21474836.48", True, "At most 21474836.47 cores"),
])
def test_parse_cores_refuses_with_a_message(text, unlimited, message):
    with pytest.raises(ValueError, match=message):
        parse_cores(text, unlimited=unlimited, maximum=INT_MAX)
