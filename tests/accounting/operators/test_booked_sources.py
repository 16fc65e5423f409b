"""Every booked number an operator reads says where it comes from (Redis live, the PostgreSQL
row, SUM(proc) now), and a page that shows two that differ says why (rounding, recompute
lag, drift). Rendered through the admin with real PostgreSQL and Redis."""

import html
import re

import pytest
from django.urls import reverse

from accounting.live import keys
from accounting.models import Subscription
from accounting.operators.booked_sources import DRIFT, RECOMPUTE_LAG, ROUNDING, booked_sources
from accounting.reconcile.reseed import seed_show
from tests.farms import build_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_redis")]

LEGEND = "Where booked cores come from."
ROUNDING_WHY = "rounding: Redis truncates each proc's cores to whole cores: the procs reserve 6 cores, which Redis counts as 5 cores"
LAG_WHY = "recompute lag: the PostgreSQL row (7 cores) is as of the last recompute; SUM(proc) now is 6 cores"
# The list says each reason in a few words (the sentence is its tooltip), so the column fits the page.
ROUNDING_SHORT = "rounding: 6 cores reserved, Redis counts 5"
LAG_SHORT = "recompute lag: row 7 cores, SUM(proc) now 6"


def visible_text(page: str) -> str:
    """What a person reads: tags gone, entities read, spaces collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]*>", " ", page)))


@pytest.fixture
def lagging(db):
    """A scheduler-managed subscription whose three sources all differ: procs of 2.5, 2.5 and
    1 cores (6 reserved, 5 in Redis, which truncates each), and a PostgreSQL row of 7, as the
    last recompute left it before a proc went."""
    farm = build_farm(managed=True)
    for cores in (250, 250, 100):
        farm.add_proc(cores=cores)
    seed_show(show_id=farm.show.id)
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_cores=700)
    return farm


def test_the_sources_and_why_they_differ(lagging, acct_redis):
    sub = Subscription.objects.select_related("show").get(pk=lagging.subscription.pk)
    sources = booked_sources(subscriptions=[sub])[0][sub.pk]
    assert (sources.redis, sources.pg_row, sources.proc_exact, sources.proc_per_proc) == (500, 700, 600, 500)
    assert [r.kind for r in sources.reasons] == [ROUNDING, RECOMPUTE_LAG]

    acct_redis.hset(keys.sub(show_id=lagging.show.id, alloc_id=lagging.alloc.id), "int_cores", 9)
    sources = booked_sources(subscriptions=[sub])[0][sub.pk]
    assert [r.kind for r in sources.reasons] == [ROUNDING, RECOMPUTE_LAG, DRIFT]
    assert sources.reasons[-1].text.startswith("Redis is 4 cores above SUM(proc) now counted per proc")


def test_agreeing_sources_need_no_why_and_no_proc_read(django_assert_num_queries):
    farm = build_farm(managed=True)
    farm.add_proc(cores=300)
    seed_show(show_id=farm.show.id)  # Redis 3, row 300 centicores: they agree
    sub = Subscription.objects.select_related("show").get(pk=farm.subscription.pk)
    with django_assert_num_queries(0):
        sources = booked_sources(subscriptions=[sub])[0][sub.pk]
    assert not sources.differ and sources.reasons == []


def test_the_subscription_list_labels_both_numbers_and_says_why(admin_client, lagging):
    cuebot = build_farm(managed=False)
    cuebot.add_proc(cores=250)
    text = visible_text(admin_client.get(reverse("admin:accounting_subscription_changelist")).content.decode())
    assert LEGEND in text
    assert "Booked: Redis live Booked: PostgreSQL row Why they differ" in text  # the column headers
    assert "5 cores 7 cores (last recompute)" in text  # Redis live, then the row, in one line
    assert f"{ROUNDING_SHORT} {LAG_SHORT}" in text
    page = admin_client.get(reverse("admin:accounting_subscription_changelist")).content.decode()
    assert f'title="{html.escape(ROUNDING_WHY.removeprefix("rounding: "))}"' in page  # the whole sentence on hover
    assert "— (Cuebot-managed) 2.5 cores (Cuebot's count) —" in text


def test_the_list_reads_redis_once_for_the_page(admin_client, lagging, monkeypatch):
    from accounting.operators import booked_sources as selectors

    build_farm(managed=True)
    calls = []
    real = selectors._redis_booked
    monkeypatch.setattr(selectors, "_redis_booked", lambda subs: calls.append(len(subs)) or real(subs))
    admin_client.get(reverse("admin:accounting_subscription_changelist"))
    assert calls == [2]  # one pipeline for both managed rows, none per row


def test_the_subscription_form_labels_its_booked_numbers(admin_client, lagging):
    page = admin_client.get(reverse("admin:accounting_subscription_change", args=[lagging.subscription.pk]))
    text = visible_text(page.content.decode())
    assert "Booked cores" in text and LEGEND in text
    assert "Booked: Redis live: 5 cores" in text
    assert "Booked: PostgreSQL row: 7 cores (last recompute)" in text
    assert ROUNDING_WHY in text and LAG_WHY in text  # the form says each reason in full
    assert "Tier: 0.07 (7 booked ÷ 100 size, cores; Cuebot books the lowest tier first)" in text


def test_the_overview_shows_the_row_beside_redis_and_why(admin_client, lagging):
    text = visible_text(admin_client.get(reverse("admin:index")).content.decode())
    assert LEGEND in text
    assert (
        f"{lagging.show.str_name} Scheduler Redis live {lagging.alloc.str_name}: 5 / 100 (200) cores "
        f"· PostgreSQL row 7 {ROUNDING_WHY} {LAG_WHY}"
    ) in text


def test_the_drift_page_names_what_it_compares(admin_client, lagging):
    text = visible_text(admin_client.get(reverse("acct-drift-show", args=[lagging.show.pk])).content.decode())
    assert LEGEND in text
    assert (
        f"{lagging.show.str_name} / {lagging.alloc.str_name}: Redis live 5 cores, SUM(proc) now 5 cores; size" in text
    )
    assert "so rounding is no difference here" in text and "The PostgreSQL row is not compared" in text
    assert "Redis agrees with PostgreSQL." in text


@pytest.mark.parametrize("model", ["folderresource", "jobresource", "layerresource", "point"])
def test_the_other_accounting_lists_name_their_booked_source(admin_client, lagging, model):
    text = visible_text(admin_client.get(reverse(f"admin:accounting_{model}_changelist")).content.decode())
    assert "Booked: PostgreSQL row" in text


def test_on_current_opencue_the_overview_names_only_cuebots_row_kept_for_every_show(admin_client, maestro_era):
    farm = build_farm(managed=True)
    farm.add_proc(cores=250)
    text = visible_text(admin_client.get(reverse("admin:index")).content.decode())
    assert LEGEND in text and "Cuebot's own count for every show, flagged (Maestro plans it) or not" in text
    assert "Redis live" not in text and "recompute lag" not in text and "beside Redis" not in text
