"""What the scheduler hears, in the names an operator knows (the `acct_listen` command).

Ids are named as the release answers name them (accounting.operators.names: kept a minute); a name
that cannot be found (a job deleted since) reads "gone" beside its id, which is kept for scripts.
"""

from accounting.notify.listen import Heard
from accounting.notify.payloads import RELEASE
from accounting.operators.names import NAMED_KINDS, names_of

# The vertices of a limit change whose "id" names a row (a subscription's carries its show and allocation).
_VERTICES = ("folder", "job")


def named_fields(*, heard: Heard) -> dict[str, object]:
    """The payload's fields with `<field>_name` beside each id, named as a release answer names them."""
    vertex = str(heard.fields.get("vertex"))
    ids: dict[str, tuple[str, str]] = {
        name: (name if name in NAMED_KINDS else vertex, value)
        for name, value in heard.fields.items()
        if isinstance(value, str) and (name in NAMED_KINDS or (name == "id" and vertex in _VERTICES))
    }
    names = names_of(wanted=ids.values())
    return {**heard.fields, **{f"{name}_name": names[wanted] for name, wanted in ids.items()}}


def describe(*, heard: Heard) -> str:
    """One line for a person."""
    if heard.problem:
        return f"{heard.channel}: the scheduler would drop this ({heard.problem}): {heard.payload}"
    f = named_fields(heard=heard)
    if heard.channel == RELEASE:
        return (
            f"release {f['show_name']} / {f['alloc_name']}, folder {f['folder_name']}, job {f['job_name']}, "
            f"layer {f.get('layer_name', '?')}, dept {f.get('dept_name', '?')}: "
            f"cores {f['cores']:+d}, GPUs {f['gpus']:+d}"
        )
    if f["vertex"] == "sub":
        return f"limit subscription {f['show_name']} / {f['alloc_name']}: burst {f['burst']} cores"
    what = ", ".join(
        f"{cap} {'unlimited' if f[cap] == -1 else f[cap]}" for cap in ("max_cores", "max_gpus") if cap in f
    )
    return f"limit {f['vertex']} {f['id_name']}: {what}"
