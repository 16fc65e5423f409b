"""The payloads, byte for byte as Cuebot's AccountingNotifier formats them (a Java format string:
compact, keys in a fixed order, cores truncated toward zero and negated)."""

from accounting.notify.listen import decode
from accounting.notify.payloads import (
    LIMIT_CHANGE,
    RELEASE,
    ReleasedAmount,
    max_cores_payload,
    max_gpus_payload,
    release_payload,
    release_payloads,
    subscription_burst_payload,
)

IDS = dict(
    show_id="00000000-0000-0000-0000-0000000000a1",
    alloc_id="00000000-0000-0000-0000-0000000000b2",
    folder_id="00000000-0000-0000-0000-0000000000c3",
    job_id="00000000-0000-0000-0000-0000000000d4",
    layer_id="00000000-0000-0000-0000-0000000000e5",
    dept_id="00000000-0000-0000-0000-0000000000f6",
)
CUEBOT_RELEASE = '{"show":"%s","alloc":"%s","folder":"%s","job":"%s","layer":"%s","dept":"%s","cores":%d,"gpus":%d}'


def cuebot_release(cores: int, gpus: int) -> str:
    return CUEBOT_RELEASE % (
        IDS["show_id"],
        IDS["alloc_id"],
        IDS["folder_id"],
        IDS["job_id"],
        IDS["layer_id"],
        IDS["dept_id"],
        cores,
        gpus,
    )


def amount(cores: int, gpus: int = 0, **other) -> ReleasedAmount:
    return ReleasedAmount(**(IDS | other), cores=cores, gpus=gpus)


def test_a_release_payload_is_cuebots_format_negated():
    key = amount(0).key
    assert release_payload(key=key, cores=2, gpus=1) == cuebot_release(-2, -1)


def test_procs_sharing_every_key_are_summed_into_one_payload_of_per_proc_amounts():
    # Two 1.5-core procs count 1 core each (per proc, truncated): the sum is -2, not -3.
    assert release_payloads(released=[amount(1, 1), amount(1, 1)]) == [cuebot_release(-2, -2)]


def test_procs_differing_in_any_key_get_their_own_payload():
    other_layer = "00000000-0000-0000-0000-0000000000e9"
    payloads = release_payloads(released=[amount(2), amount(2, layer_id=other_layer)])
    assert payloads == [cuebot_release(-2, 0), cuebot_release(-2, 0).replace(IDS["layer_id"], other_layer)]


def test_cap_payloads_convert_cores_once_and_pass_unlimited_and_gpus_verbatim():
    assert subscription_burst_payload(show_id=IDS["show_id"], alloc_id=IDS["alloc_id"], burst_centicores=25050) == (
        '{"vertex":"sub","show":"%s","alloc":"%s","burst":250}' % (IDS["show_id"], IDS["alloc_id"])
    )
    assert max_cores_payload(vertex="folder", id=IDS["folder_id"], max_centicores=-1) == (
        '{"vertex":"folder","id":"%s","max_cores":-1}' % IDS["folder_id"]
    )
    assert max_cores_payload(vertex="job", id=IDS["job_id"], max_centicores=1250) == (
        '{"vertex":"job","id":"%s","max_cores":12}' % IDS["job_id"]
    )
    assert (
        max_gpus_payload(vertex="job", id=IDS["job_id"], max_gpus=-1)
        == '{"vertex":"job","id":"%s","max_gpus":-1}' % IDS["job_id"]
    )


def test_every_payload_parses_as_the_scheduler_parses_it():
    payloads = [
        (RELEASE, cuebot_release(-3, -1)),
        (
            LIMIT_CHANGE,
            subscription_burst_payload(show_id=IDS["show_id"], alloc_id=IDS["alloc_id"], burst_centicores=100),
        ),
        (LIMIT_CHANGE, max_cores_payload(vertex="folder", id=IDS["folder_id"], max_centicores=-1)),
        (LIMIT_CHANGE, max_gpus_payload(vertex="folder", id=IDS["folder_id"], max_gpus=2)),
    ]
    assert [decode(channel=c, payload=p).problem for c, p in payloads] == [None] * 4


def test_what_the_scheduler_would_drop_is_named():
    assert decode(channel=RELEASE, payload="{").problem.startswith("not JSON")
    assert decode(channel=RELEASE, payload=cuebot_release(-1, 0).replace(IDS["job_id"], "job-1")).problem == (
        "job is not a UUID: 'job-1'"
    )
    assert decode(channel=RELEASE, payload=cuebot_release(-1, 0).replace('"gpus":0', '"gpus":4294967296')).problem == (
        "gpus is not an i32: 4294967296"
    )
    assert decode(channel=LIMIT_CHANGE, payload='{"vertex":"point","id":"x"}').problem == "unknown vertex 'point'"
