"""Every sample output in the pages is what the command prints (issue 47).

A sample is a fenced text block whose line before is `<!-- sample: STATE -->`: a transcript whose
`$ manage.py …` lines are run in order, in process (call_command, which prints what manage.py
prints), on one small farm in the state the marker names, and whose other lines are what each
command printed (its output, then a CommandError as manage.py prints it). Ids (UUIDs) print as
`…`. Every text block of the operator's pages must be such a sample, so a new one cannot go
unchecked.

The farm is the first hour's (docs/attaching.md), in the Maestro era: `alpha`, unflagged, whose
job's layer `comp` runs 2 cores on `local.general`, and `beta`, flagged, 16 cores and a GPU on
`local.gpu`. "drifted": beta's subscription set 3 cores low and alpha's layer 1.5 cores high by
hand, as a stray UPDATE would leave Cuebot's rows.
"""

import io
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from accounting.models import LayerResource, Subscription
from shows.models import Alloc, Job, Layer, Show
from tests.farms import Farm, build_farm
from tests.pages import DOCUMENTS, OPERATOR_PAGES
from tests.service_role import as_cuebot, as_observer

SAMPLE = re.compile(r"^( *)<!-- sample: ([^>]+?) -->\n\1```text\n(.*?)^\1```$", re.M | re.S)
TEXT_BLOCK = re.compile(r"^ *```text$", re.M)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# What each state names: whether the instance writes, and whether the two rows are drifted.
STATES = {"observer, drifted": (False, True), "writer, drifted": (True, True), "writer, clean": (True, False)}


def samples() -> list[tuple[Path, str, str]]:
    """(page, state, block without its indent) of every marked sample of every page."""
    found = []
    for page in DOCUMENTS:
        for indent, state, block in SAMPLE.findall(page.read_text()):
            found.append((page, state, re.sub(rf"^{indent}", "", block, flags=re.M)))
    return found


def transcript(block: str) -> list[tuple[list[str], str]]:
    """[(the command's words after manage.py, what the block says it printed)]."""
    steps = []
    for line in block.splitlines(keepends=True):
        if line.startswith("$ "):
            words = shlex.split(line[2:])
            assert words[0] == "manage.py", f"a sample runs manage.py commands only: {line}"
            steps.append((words[1:], ""))
        else:
            assert steps, f"a sample starts with the command it shows:\n{block}"
            steps[-1] = (steps[-1][0], steps[-1][1] + line)
    return steps


def printed(arguments: list[str]) -> str:
    """What `manage.py ARGUMENTS` prints, ids elided; a CommandError as manage.py writes it."""
    out = io.StringIO()
    try:
        call_command(*arguments, stdout=out, stderr=out)
    except CommandError as error:
        out.write(f"CommandError: {error}\n")
    except SystemExit:
        pass  # acct_drift's exit 1 on drift: its lines are already written
    return UUID.sub("…", out.getvalue())


@as_cuebot()
def first_hour_farm() -> tuple[Farm, Farm]:
    alpha, beta = build_farm(managed=False), build_farm(managed=True)
    for farm, show, alloc in ((alpha, "alpha", "local.general"), (beta, "beta", "local.gpu")):
        Show.objects.filter(pk=farm.show.pk).update(str_name=show)
        Alloc.objects.filter(pk=farm.alloc.pk).update(str_name=alloc)
    Job.objects.filter(pk=alpha.job.pk).update(str_name="alpha-sh020-jdoe_comp_v002")
    Layer.objects.filter(pk=alpha.layer.pk).update(str_name="comp")
    alpha.add_proc(cores=200)
    beta.add_proc(cores=800, gpus=1)
    beta.add_proc(cores=800)
    return alpha, beta


@as_cuebot()
def drift_by_hand(*, alpha: Farm, beta: Farm) -> None:
    Subscription.objects.filter(pk=beta.subscription.pk).update(int_cores=1300)
    LayerResource.objects.filter(layer=alpha.layer).update(int_cores=350)


@contextmanager
def in_state(state: str, *, settings, alpha: Farm, beta: Farm) -> Iterator[None]:
    writes, drifted = STATES[state]
    if drifted:
        drift_by_hand(alpha=alpha, beta=beta)
    settings.ACCOUNTING_WRITES = writes
    if writes:
        yield
    else:
        with as_observer():
            yield


@pytest.mark.django_db
def test_every_sample_is_what_its_commands_print(maestro_era, settings):
    alpha, beta = first_hour_farm()
    found = samples()
    assert found, "no marked sample in the pages"
    for page, state, block in found:
        assert state in STATES, f"{page.name}: unknown sample state {state!r} (one of {sorted(STATES)})"
        with in_state(state, settings=settings, alpha=alpha, beta=beta):
            for arguments, shown in transcript(block):
                assert printed(arguments) == shown, f"{page.name}: $ manage.py {shlex.join(arguments)}"


def test_every_text_block_of_the_operators_pages_is_a_checked_sample():
    for page in OPERATOR_PAGES:
        text = page.read_text()
        assert len(TEXT_BLOCK.findall(text)) == len(SAMPLE.findall(text)), (
            f"{page.name}: a text block without a <!-- sample: STATE --> line before it"
        )
