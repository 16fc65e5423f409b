"""Cores as a person reads and types them in the admin: columns, form fields, read-only values.

PostgreSQL stores centicores; the admin shows and takes cores (accounting.live.units converts,
exactly, both ways), so an operator who types 200 gets 200 cores, never 2. GPUs are counted
whole everywhere in Cuebot, so a stored GPU number is the number of GPUs; where it sits beside
centicore columns and could be read as hundredths (a show's defaults, 100 and 100000), its
field says so. Memory, which
Cuebot stores in KB, reads in binary units (4194304 KB is "4 GiB"). Cuebot's derived
`float_tier` reads with what it is made of ("0.44: 70 booked ÷ 160 size, cores"), since a bare
"Tier: 0.44" tells an operator nothing.
"""

from django import forms
from django.contrib import admin
from django.utils.text import capfirst

from accounting.limits.changes import WHOLE_CORES_COLUMNS, column_max
from accounting.live.units import UNLIMITED, UNLIMITED_WORD, CoresRefused, cores_text, format_cores, parse_cores


def cores_column(field: str, label: str | None = None):
    @admin.display(description=label or field.replace("int_", "").replace("_", " "), ordering=field)
    # Assigned as a ModelAdmin attribute, so the admin calls it as a method: (model_admin, obj).
    def column(_model_admin, obj) -> str:
        return format_cores(getattr(obj, field))

    return column


def gpus_text(count: int, *, unlimited: bool = False) -> str:
    """A stored GPU count as a person reads it: '1 GPU', '100 GPUs', and 'unlimited' for -1 where
    Cuebot means that by it (a folder's max GPUs; a job's -1 is compared as a number)."""
    if unlimited and count == UNLIMITED:
        return UNLIMITED_WORD
    return "1 GPU" if count == 1 else f"{count} GPUs"


def gpus_column(field: str, label: str, *, unlimited: bool = False):
    @admin.display(description=label, ordering=field)
    def column(_model_admin, obj) -> str:
        return gpus_text(getattr(obj, field), unlimited=unlimited)

    return column


NBSP = "\u00a0"


def cores_and_gpus_column(cores_field: str, gpus_field: str, label: str, *, unlimited_gpus: bool = False):
    """A list column with a row's cores and GPUs together ('47.5 cores, 4 GPUs'), sorted by the
    cores: a list with a column for each pushed its last columns out of its box beside the
    sidebar and the filter at 1280 pixels. A narrow column breaks between the two amounts,
    never inside one."""

    @admin.display(description=label, ordering=cores_field)
    def column(_model_admin, obj) -> str:
        cores = format_cores(getattr(obj, cores_field))
        gpus = gpus_text(getattr(obj, gpus_field), unlimited=unlimited_gpus)
        cores, gpus = (
            f"{UNLIMITED_WORD} cores" if cores == UNLIMITED_WORD else cores,
            f"{UNLIMITED_WORD} GPUs" if gpus == UNLIMITED_WORD else gpus,
        )
        return f"{cores.replace(' ', NBSP)}, {gpus.replace(' ', NBSP)}"

    return column


NOT_UNLIMITED_GPUS = "-1 is not unlimited here (Cuebot keeps this default as a plain count): enter 0 or more GPUs."


def whole_gpus_field(*, label: str, cuebot_default: int, required: bool) -> forms.IntegerField:
    """A GPU count Cuebot stores as typed and books nothing against (a show's defaults)."""
    return forms.IntegerField(
        label=label,
        required=required,
        min_value=0,
        max_value=2**31 - 1,
        error_messages={"min_value": NOT_UNLIMITED_GPUS},
        help_text=(
            f"Whole GPUs, as typed: Cuebot keeps only cores in hundredths, so its default here, "
            f"{cuebot_default}, is {gpus_text(cuebot_default)}. No booking compares against it."
        ),
    )


def format_kb(kb: int) -> str:
    """Cuebot's KB as a person reads them: '4 GiB', '512 MiB', '1.5 GiB'; 0 is 'none'."""
    if kb == 0:
        return "none"
    for unit, size in (("TiB", 1024**3), ("GiB", 1024**2), ("MiB", 1024)):
        if kb >= size:
            return f"{kb / size:.4g} {unit}"
    return f"{kb} KiB"


def memory_column(field: str, label: str):
    @admin.display(description=label, ordering=field)
    def column(_model_admin, obj) -> str:
        return format_kb(getattr(obj, field))

    return column


def tier_column(*, base: str, base_label: str, soft: bool):
    """Cuebot's `float_tier` (shows/cuebot_schema/triggers.sql), with the numbers it derives from.

    Cuebot's dispatcher books the lowest tier first. The tier is booked cores over `base` (a
    subscription's size, a job's minimum): `soft` (folders, points) it stops at 1 once the
    minimum is met. Cuebot's special values are said in words: nothing booked is minus the base
    in centicores (it ranks first), no base is booked + 1 (or 1, soft). The triggers derive it at
    every UPDATE of the row, so it matches the row's booked counter, not Redis.
    """

    @admin.display(description="tier")
    def column(_model_admin, obj) -> str:
        tier, booked, size = obj.float_tier, obj.int_cores, getattr(obj, base)
        ratio = f"{cores_text(booked)} booked ÷ {cores_text(size)} {base_label}, cores"
        if booked == 0 and size != 0:
            meaning = f"nothing booked: Cuebot ranks it first (minus the {base_label} in centicores)"
        elif size == 0:
            meaning = f"no {base_label}: " + ("1" if soft else "booked + 1")
        elif soft and booked >= size:
            meaning = f"{ratio}: the {base_label} is met, so 1"
        else:
            meaning = ratio
        return f"{float(tier):g} ({meaning}; Cuebot books the lowest tier first)"

    return column


class CoresField(forms.CharField):
    """A centicore column entered in cores: '2.5', '200', and 'unlimited' where -1 means that."""

    def __init__(self, *, unlimited: bool, maximum: int, whole: bool = False, **kwargs):
        self.unlimited = unlimited
        self.maximum = maximum
        self.whole = whole
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return cores_text(value) if isinstance(value, int) else value

    def to_python(self, value):
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return parse_cores(text=text, unlimited=self.unlimited, maximum=self.maximum, whole=self.whole)
        except CoresRefused as error:
            raise forms.ValidationError(str(error), code="invalid") from None

    def has_changed(self, initial, data) -> bool:
        try:
            return self.to_python(data) != initial
        except forms.ValidationError:
            return True


class GpusField(forms.IntegerField):
    """A GPU cap typed as a whole count, and 'unlimited' (stored as -1) where Cuebot means that by
    -1, shown as it is typed, as CoresField shows a folder's unlimited cores."""

    widget = forms.TextInput  # a number input cannot hold the word

    def __init__(self, *, unlimited: bool, **kwargs):
        self.unlimited = unlimited
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return UNLIMITED_WORD if self.unlimited and value == UNLIMITED else value

    def to_python(self, value):
        if self.unlimited and isinstance(value, str) and value.strip().lower() == UNLIMITED_WORD:
            return UNLIMITED
        return super().to_python(value)


def gpu_cap_label(field: str) -> str:
    """'int_max_gpus' -> 'max GPUs'."""
    return field.removeprefix("int_").replace("_gpus", " GPUs").replace("_", " ")


class CoresFormMixin:
    """ModelAdmin mixin: the fields named in `cores_fields` are entered and shown in cores, those
    in `gpu_fields` named as GPU caps.

    `cores_fields` maps a field name to whether -1 means unlimited there (only a folder's
    maxima: accounting.limits.changes.UNLIMITED_ALLOWED); elsewhere -1 is refused. `gpu_fields`
    does the same for GPU caps, which are whole counts as stored.
    """

    cores_fields: dict[str, bool] = {}
    gpu_fields: dict[str, bool] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in cls.cores_fields:
            setattr(cls, f"{name}_in_cores", cores_column(name))
        for name, unlimited in cls.gpu_fields.items():
            setattr(cls, f"{name}_in_gpus", gpus_column(name, gpu_cap_label(name), unlimited=unlimited))

    def get_fields(self, request, obj=None):
        """Read-only (no change permission), the same fields show as text in cores and GPUs."""
        fields = super().get_fields(request, obj)
        if obj is None or self.has_change_permission(request, obj):
            return fields
        return [
            f"{name}_in_cores" if name in self.cores_fields else f"{name}_in_gpus" if name in self.gpu_fields else name
            for name in fields
        ]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name in self.gpu_fields:
            unlimited = self.gpu_fields[db_field.name]
            return db_field.formfield(
                form_class=GpusField,
                unlimited=unlimited,
                label=capfirst(gpu_cap_label(db_field.name)),
                help_text="Whole GPUs." + (f" -1 or '{UNLIMITED_WORD}' for no limit." if unlimited else ""),
            )
        if db_field.name not in self.cores_fields:
            return super().formfield_for_dbfield(db_field, request, **kwargs)
        unlimited = self.cores_fields[db_field.name]
        label = str(db_field.verbose_name).capitalize()
        whole = (db_field.model, db_field.name) in WHOLE_CORES_COLUMNS
        hint = (
            "In whole cores, as Cuebot keeps this cap." if whole else "In cores, up to two decimals (2.5, 0.25)."
        ) + (f" -1 or '{UNLIMITED_WORD}' for no limit." if unlimited else "")
        return CoresField(
            unlimited=unlimited,
            maximum=column_max(model=db_field.model, column=db_field.name),
            whole=whole,
            required=not db_field.blank,
            label=label if "cores" in label else f"{label} (cores)",
            help_text=hint,
        )
