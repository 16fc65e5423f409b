import pytest
from django.core.management import CommandError, call_command

from accounting.ownership import switching
from shows.models import Show
from tests.processes import closed_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_real_seeding(monkeypatch):
    monkeypatch.setattr(switching, "seed_show", lambda *, show_id: None)


def flag(show) -> bool:
    return Show.objects.get(pk=show.pk).b_scheduler_managed


@pytest.mark.parametrize("value", ["true", "TRUE", "True", "on", "ON"])
def test_moves_a_show_to_the_scheduler_and_prints_old_and_new(
    cuebot_farm, value, capsys, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("set_scheduler_managed", cuebot_farm.show.str_name, value)
    assert capsys.readouterr().out.strip() == f"{cuebot_farm.show.str_name}: b_scheduler_managed false -> true"
    assert flag(cuebot_farm.show) is True


@pytest.mark.parametrize("value", ["false", "off", "Off"])
def test_moves_a_show_back_to_cuebot(farm, value, capsys, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("set_scheduler_managed", farm.show.str_name, value)
    assert "b_scheduler_managed true -> false" in capsys.readouterr().out
    assert flag(farm.show) is False


@pytest.mark.parametrize("value", ["yes", "1", "onn", "", "truee"])
def test_a_value_other_than_on_off_true_or_false_is_refused(cuebot_farm, value):
    with pytest.raises(CommandError, match="value must be on, off, true or false") as error:
        call_command("set_scheduler_managed", cuebot_farm.show.str_name, value)
    assert error.value.returncode == 2
    assert flag(cuebot_farm.show) is False


def test_an_unknown_show_is_refused(cuebot_farm):
    with pytest.raises(CommandError, match="no show named 'nope'") as error:
        call_command("set_scheduler_managed", "nope", "true")
    assert error.value.returncode == 2
    assert not Show.objects.filter(b_scheduler_managed=True).exists()


def test_a_move_to_the_scheduler_redis_cannot_take_exits_1_and_changes_nothing(
    cuebot_farm,
    settings,
    fresh_accounting_client,
    django_capture_on_commit_callbacks,
):
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    with (
        pytest.raises(CommandError, match="could not be closed before the switch") as error,
        django_capture_on_commit_callbacks(execute=True),
    ):
        call_command("set_scheduler_managed", cuebot_farm.show.str_name, "true")
    assert error.value.returncode == 1
    assert flag(cuebot_farm.show) is False
