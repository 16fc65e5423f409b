"""Admin columns that show stored centicores as cores, with the unit."""
from django.contrib import admin

from accounting.units import format_cores


def cores_column(field: str, label: str | None = None):
    @admin.display(description=label or field.replace("int_", "").replace("_", " "), ordering=field)
    # Assigned as a ModelAdmin attribute, so the admin calls it as a method: (model_admin, obj).
    def column(_model_admin, obj) -> str:
        return format_cores(getattr(obj, field))

    return column
