import pytest

from accounting.live.units import (
    NOT_UNLIMITED_HERE,
    TOO_FINE,
    UNLIMITED,
    CoresRefused,
    centicores_from_cores,
    cores_from_centicores,
    cores_number,
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
    assert format_cores(1) == "0.01 cores"
    assert format_cores(250) == "2.5 cores"
    assert format_cores(100) == "1 core"
    assert format_cores(0) == "0 cores"
    assert format_cores(-1) == "unlimited"


INT_MAX = 2**31 - 1


@pytest.mark.parametrize(
    ("centicores", "text"),
    [(0, "0"), (1, "0.01"), (10, "0.1"), (250, "2.5"), (20000, "200"), (12345, "123.45"), (UNLIMITED, "unlimited")],
)
def test_cores_text_round_trips_exactly(centicores, text):
    assert cores_text(centicores) == text
    assert parse_cores(text=text, unlimited=True, maximum=INT_MAX) == centicores


NUMBER = "Enter a number of cores such as 4, 2.5 or 0.25."
NUMBER_OR_UNLIMITED = "Enter a number of cores such as 4, 2.5 or 0.25, or -1 for unlimited."


@pytest.mark.parametrize(
    ("text", "unlimited", "message"),
    [
        ("2.125", True, TOO_FINE),
        ("0.001", False, TOO_FINE),
        ("unlimited", False, NOT_UNLIMITED_HERE),
        ("-1", False, NOT_UNLIMITED_HERE),
        ("-2", True, NUMBER_OR_UNLIMITED),
        ("-0.5", False, NUMBER),
        (" 7", True, NUMBER_OR_UNLIMITED),
        ("٣", True, NUMBER_OR_UNLIMITED),
        ("1e3", False, NUMBER),
        (".5", False, NUMBER),
        ("5.", False, NUMBER),
        ("", False, NUMBER),
        ("21474836.48", True, "At most 21474836.47 cores here."),
    ],
)
def test_parse_cores_refuses_with_one_message_per_reason(text, unlimited, message):
    with pytest.raises(CoresRefused) as refused:
        parse_cores(text=text, unlimited=unlimited, maximum=INT_MAX)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("text", "centicores"),
    [("2.5", 250), ("0.25", 25), ("0.01", 1), ("1.0", 100), ("2.50", 250), ("007", 700), ("21474836.47", INT_MAX)],
)
def test_parse_cores_takes_up_to_two_decimals_exactly(text, centicores):
    assert parse_cores(text=text, unlimited=False, maximum=INT_MAX) == centicores


@pytest.mark.parametrize(
    ("centicores", "text", "number"),
    [
        (10**14 - 1, "999999999999.99", 999999999999.99),
        (10**14, "1000000000000", 10**12),
        (2**63 - 1, "92233720368547758.07", None),
        (99999999999900, "999999999999", 999999999999),
    ],
)
def test_large_values_read_exactly_never_in_exponent_form(centicores, text, number):
    assert cores_text(centicores) == text
    assert format_cores(centicores) == f"{text} cores"
    if number is not None:
        assert cores_number(centicores) == number and type(cores_number(centicores)) is type(number)
        assert "e" not in repr(cores_number(centicores))
