"""What the scheduler hears, in the names an operator knows (the `acct_listen` command).

Ids in a payload are looked up once each; a name that cannot be found (a job deleted since)
reads "gone" beside its id, which is kept for scripts.
"""

from dataclasses import dataclass, field

from accounting.notify.listen import Heard
from accounting.notify.payloads import RELEASE
from shows.models import Alloc, Dept, Folder, Job, Layer, Show

# the tables a payload's ids name
Named = type[Show | Alloc | Folder | Job | Layer | Dept]

# payload field -> the table its id names
_NAMED: dict[str, Named] = {"show": Show, "alloc": Alloc, "folder": Folder, "job": Job, "layer": Layer, "dept": Dept}
# keyed by whatever the payload's "vertex" holds (a decoded JSON value, or None when it is absent)
_VERTEX: dict[object, Named | None] = {"sub": None, "folder": Folder, "job": Job}


@dataclass
class Names:
    """A cache of id -> name for the life of one listening command."""

    known: dict[tuple[Named, str], str] = field(default_factory=dict)

    def of(self, *, model: Named, id: str) -> str:
        if (model, id) not in self.known:
            name = model.objects.filter(pk=id).values_list("str_name", flat=True).first()
            self.known[(model, id)] = name if name is not None else "gone"
        return self.known[(model, id)]


def named_fields(*, heard: Heard, names: Names) -> dict[str, object]:
    """The payload's fields with `<field>_name` beside each id."""
    out = dict(heard.fields)
    for name, value in heard.fields.items():
        model = _NAMED.get(name)
        if name == "id":
            model = _VERTEX.get(heard.fields.get("vertex"))
        if model is not None and isinstance(value, str):
            out[f"{name}_name"] = names.of(model=model, id=value)
    return out


def describe(*, heard: Heard, names: Names) -> str:
    """One line for a person."""
    if heard.problem:
        return f"{heard.channel}: the scheduler would drop this ({heard.problem}): {heard.payload}"
    f = named_fields(heard=heard, names=names)
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
