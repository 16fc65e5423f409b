"""manage.py acct_usage: the report in table, CSV or JSON, --reconcile's exit status, bad input in one line."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from accounting.models import UsageRollup
from accounting.usage.report import parse_query, report_csv, usage_report
from tests.accounting.usage.history_rows import Run, add_job_history, add_runs
from tests.farms import build_farm

SINCE = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())


@pytest.fixture
def history(db):
    farm = build_farm(managed=False)
    job = add_job_history(farm, started=SINCE, stopped=SINCE + 7200, core_seconds=(3600, 0))
    add_runs(Run(job, farm.alloc.id, 100, SINCE, SINCE + 3600, exit_status=0))
    missing = add_job_history(farm, started=SINCE, stopped=SINCE + 7200, core_seconds=(99, 0))
    return farm, missing


def run(*args: str, capsys) -> str:
    call_command("acct_usage", *args)
    return capsys.readouterr().out


def test_the_csv_is_the_reports_and_the_json_its_rows(history, capsys):
    farm, _ = history
    period = ("--since", "2026-11-01", "--until", "2026-11-02T00:00:00+00:00")

    out = run(*period, "--by", "show,allocation", "--format", "csv", capsys=capsys)

    query = parse_query(since="2026-11-01", until="2026-11-02T00:00:00+00:00", by="show,allocation")
    assert out == report_csv(usage_report(query=query))
    assert out.splitlines()[1].startswith(f"{farm.show.str_name},{farm.alloc.str_name},1.000000,1.000000,0.000000")
    rows = json.loads(run(*period, "--format", "json", capsys=capsys))["rows"]
    assert rows == [
        {
            "show": farm.show.str_name,
            "core_hours": "1.000000",
            "core_hours_succeeded": "1.000000",
            "core_hours_failed": "0.000000",
            "core_hours_running": "0.000000",
            "gpu_hours": "0.000000",
            "promised_core_hours": None,
            "core_hours_above_size": None,
        }
    ]
    assert "promise unknown for" in run(*period, capsys=capsys)


def test_reconcile_lists_the_differing_jobs_and_exits_1(history, capsys):
    _, missing = history
    with pytest.raises(SystemExit) as ended:
        call_command("acct_usage", "--since", "2026-11-01", "--until", "2026-11-02", "--reconcile")
    assert ended.value.code == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and f"job-{missing[:8]}" in lines[0] and "job_history 99" in lines[0]
    assert lines[1] == "1 job(s) finished in the period differ from job_history"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--since", "2026-11-02", "--until", "2026-11-01"), "the period ends (2026-11-01) before or when it starts"),
        (("--since", "2026-11-01", "--until", "2026-11-02", "--by", "team"), "unknown grouping 'team'"),
        (("--since", "2026-11-01", "--until", "day"), "until 'day' is not an ISO 8601 date"),
        (("--since", "2026-11-01", "--until", "2026-11-02", "--per", "hour"), "unknown period 'hour'"),
        (("--since", "2026-11-01", "--until", "2026-11-02", "--format", "xml"), "unknown format 'xml'"),
        (
            (
                "--since",
                "2026-11-01",
            ),
            "--since and --until are both required",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(db, args, line):
    with pytest.raises(CommandError) as refused:
        call_command("acct_usage", *args)
    assert refused.value.returncode == 2
    assert str(refused.value).startswith(line) and "\n" not in str(refused.value)


def test_the_rollup_command_rolls_up_and_rebuilds_a_day(db, capsys):
    farm = build_farm(managed=False)
    day = (timezone.now() - timedelta(days=2)).date()  # whole, and past the roll-up's lag
    started = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())
    job = add_job_history(farm, started=started)
    add_runs(Run(job, farm.alloc.id, 100, started, started + 60, exit_status=0))

    call_command("acct_usage_rollup")

    assert capsys.readouterr().out in ("1 day(s) rolled up\n", "2 day(s) rolled up\n")  # yesterday, past the lag
    assert UsageRollup.objects.get(day=day).centicore_seconds == 6000
    call_command("acct_usage_rollup", "--rebuild", day.isoformat())
    assert capsys.readouterr().out == f"{day} rebuilt from frame_history\n"
    with pytest.raises(CommandError) as refused:
        call_command("acct_usage_rollup", "--rebuild", "1999-01-01")
    assert refused.value.returncode == 2 and str(refused.value).startswith("1999-01-01 is not rolled up yet")
