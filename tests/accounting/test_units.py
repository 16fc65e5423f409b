import pytest

from accounting.units import UNLIMITED, centicores_from_cores, cores_from_centicores, format_cores


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
