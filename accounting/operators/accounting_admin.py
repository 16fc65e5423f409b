"""The operator's admin over the accounting tables (subscription, folder_resource, job_resource,
layer_resource, point, host_local).

Limits are entered in cores and saved through accounting.limits.changes (validation and the Redis
publish the commands and the API get); booked counters, derived from `proc`, are read-only.
Rights follow infra.permissions: CHANGE_LIMITS to edit a limit. The procs' admin is
accounting.operators.procs_admin, the service's own records' accounting.operators.service_admin.
"""

from collections.abc import Callable
from typing import Protocol, cast

from django.contrib import admin
from django.template.loader import render_to_string
from django.utils.html import format_html, format_html_join

from accounting.limits.changes import (
    LIMIT_CHANGES,
    InvalidLimit,
    check_limit,
    set_folder_limits,
    set_job_limits,
    set_point_limits,
    set_subscription_limits,
)
from accounting.live.units import cores_text, format_cores
from accounting.models import (
    FolderResource,
    HostLocal,
    JobResource,
    LayerResource,
    Point,
    Subscription,
)
from accounting.operators.booked_sources import PG_ROW, REDIS_LIVE, BookedSources, booked_sources
from accounting.operators.display import (
    CoresFormMixin,
    cores_and_gpus_column,
    cores_column,
    gpus_column,
    tier_column,
)
from accounting.operators.farm_admin import CuebotWrittenAdmin, DeclaredAdmin
from infra import permissions
from infra.era import era
from infra.era import template_context as era_context

admin.site.site_header = "cuebot-acct"
admin.site.site_title = "cuebot-acct"
admin.site.index_title = "Farm overview"


def show_column(path: str):
    """A show column for a row that belongs to a show through `path` (e.g. 'folder__show')."""

    @admin.display(description="show", ordering=f"{path}__str_name")
    def column(_model_admin, obj) -> str:
        target = obj
        for part in path.split("__"):
            target = getattr(target, part)
        return str(target)

    return column


class LimitAdmin(CoresFormMixin, DeclaredAdmin):
    """Rows Cuebot's triggers (or Cuebot) create: never added or deleted here; only their
    limits change, through the service of `limit_service`, with CHANGE_LIMITS."""

    limit_service: Callable  # takes its row by its table's name (subscription=, folder_resource=, ...)
    # Model field -> keyword of limit_service; every other field is read-only.
    limit_keywords: dict[str, str]

    def __init__(self, model, admin_site) -> None:
        super().__init__(model, admin_site)
        self.writes = {"change": LIMIT_CHANGES[model._meta.db_table]}

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        # every LimitAdmin names its fields as a flat list of names (never None, never grouped)
        fields = cast(list[str], self.fields)
        return [name for name in fields if name not in self.limit_keywords]

    def has_change_permission(self, request, obj=None) -> bool:
        return self.open_to("change") and request.user.has_perm(permissions.CHANGE_LIMITS)

    def has_view_permission(self, request, obj=None) -> bool:
        return super().has_view_permission(request, obj) or request.user.has_perm(permissions.CHANGE_LIMITS)

    def get_form(self, request, obj=None, change=False, **kwargs):
        """The form refuses what the service would (accounting.limits.changes.check_limit), as a
        form error on the field rather than a failed save."""
        form = super().get_form(request, obj, change=change, **kwargs)
        model, limits = self.model, list(self.limit_keywords)

        class LimitForm(form):
            def _post_clean(self):
                super()._post_clean()  # the fields' and the model's own validation first
                for name in limits:
                    if name in self.errors:
                        continue
                    try:
                        check_limit(model=model, name=name, value=self.cleaned_data.get(name))
                    except InvalidLimit as error:
                        self.add_error(name, str(error))

        return LimitForm

    def save_model(self, request, obj, form, change) -> None:
        """The service re-reads the row under a lock, checks, saves and publishes after commit."""
        changes = {
            keyword: form.cleaned_data[name]
            for name, keyword in self.limit_keywords.items()
            if name in form.changed_data
        }
        if changes:
            type(self).limit_service(**{self.model._meta.db_table: obj}, **changes)


class _WithSources(Protocol):
    """A Subscription row once its booked_sources memo is set (not a model field)."""

    booked_sources: BookedSources


def _sources(obj: Subscription) -> BookedSources:
    """The subscription's booked cores by source: read for the whole page by the list
    (SubscriptionAdmin.changelist_view), else once for this row (the change form)."""
    memo = cast(_WithSources, obj)
    if not hasattr(memo, "booked_sources"):
        memo.booked_sources = booked_sources(subscriptions=[obj])[0][obj.pk]
    return memo.booked_sources


@admin.register(Subscription)
class SubscriptionAdmin(LimitAdmin):
    """Booked cores show with their source: the PostgreSQL row, and for a scheduler-managed
    show Redis live beside it, with why the two differ (accounting.operators.booked_sources.BookedSources)."""

    # Size and burst share a cell, and the cells speak in few words, so that the eight numbers
    # fit beside the sidebar and the filter without the list scrolling sideways.
    list_display = ["show", "alloc", "size_burst", "booked_redis", "cores", "booked_why", "gpus"]
    list_filter = ["show", "alloc"]
    list_select_related = ["show", "alloc"]
    search_fields = ["show__str_name", "alloc__str_name"]
    ordering = ["show__str_name", "alloc__str_name"]
    fields = ["show", "alloc", "int_size", "int_burst", "booked_redis", "cores", "booked_why_in_full", "gpus", "tier"]
    booked_fields = ("booked_redis", "cores", "booked_why_in_full", "gpus", "tier")
    # Redis live, and why it differs from the row: the redis era's only (no Redis counts a show in the others).
    REDIS_ONLY = ("booked_redis", "booked_why", "booked_why_in_full")
    cores_fields = {"int_size": False, "int_burst": False}
    limit_service = set_subscription_limits
    limit_keywords = {"int_size": "size", "int_burst": "burst"}
    size = cores_column("int_size")
    burst = cores_column("int_burst")
    tier = tier_column(base="int_size", base_label="size", soft=False)

    @admin.display(description="size (burst), cores", ordering="int_size")
    def size_burst(self, obj) -> str:
        return f"{cores_text(obj.int_size)} ({cores_text(obj.int_burst)})"

    @admin.display(description=f"booked: {PG_ROW}", ordering="int_cores")
    def cores(self, obj) -> str:
        sources = _sources(obj)
        # Outside the Redis era nothing recomputes a scheduler-managed show's row until it moves back.
        note = "Cuebot's count" if not sources.managed else "last recompute" if era().keeps_redis else "not kept"
        return format_html('{} <span class="help">({})</span>', format_cores(obj.int_cores), note)

    @admin.display(description=f"booked: {REDIS_LIVE}")
    def booked_redis(self, obj) -> str:
        sources = _sources(obj)
        if not sources.managed:
            return format_html(
                '— <span class="help" title="{}">({})</span>',
                "Redis holds nothing for a Cuebot-managed show",
                "Cuebot-managed",
            )
        return "missing or unreadable" if sources.redis is None else format_cores(sources.redis)

    @admin.display(description="why they differ")
    def booked_why(self, obj) -> str:
        """The list's cell: each reason's numbers in a few words, the whole sentence on hover
        (the full sentences made the column run past the page)."""
        reasons = _sources(obj).reasons
        if not reasons:
            return "—"
        return format_html_join(
            "", '<div title="{}"><strong>{}:</strong> {}</div>', ((r.text, r.kind, r.short) for r in reasons)
        )

    @admin.display(description="why they differ")
    def booked_why_in_full(self, obj) -> str:
        """The form's field: each reason as a sentence."""
        reasons = _sources(obj).reasons
        if not reasons:
            return "—"
        return format_html_join("", "<div><strong>{}:</strong> {}</div>", ((r.kind, r.text) for r in reasons))

    gpus = gpus_column("int_gpus", f"booked GPUs: {PG_ROW}")

    def get_list_display(self, request):
        return self._of_the_era(super().get_list_display(request))

    def get_fields(self, request, obj=None):
        return self._of_the_era(super().get_fields(request, obj))

    def _of_the_era(self, names) -> list[str]:
        return [name for name in names if era().keeps_redis or name not in self.REDIS_ONLY]

    def changelist_view(self, request, extra_context=None):
        """Read every source once for the page's rows (one Redis pipeline, one aggregate), not per row."""
        response = super().changelist_view(request, extra_context)
        changelist = getattr(response, "context_data", {}).get("cl")
        if changelist is not None:
            rows = list(changelist.result_list)
            sources, _ = booked_sources(subscriptions=rows)
            for row in rows:
                row.booked_sources = sources[row.pk]
        return response

    def get_fieldsets(self, request, obj=None):
        """The booked numbers apart, under the legend that says where each comes from."""
        fields = self.get_fields(request, obj)
        booked = [name for name in fields if name in self.booked_fields]
        return [
            (None, {"fields": [name for name in fields if name not in booked]}),
            (
                "Booked cores",
                {
                    "fields": booked,
                    "description": render_to_string("admin/accounting/_booked_sources.html", era_context()),
                },
            ),
        ]


@admin.register(FolderResource)
class FolderResourceAdmin(LimitAdmin):
    list_display = ["folder_name", "show", "booked", "minimum", "maximum"]
    list_filter = ["folder__show"]
    list_select_related = ["folder__show"]
    search_fields = ["folder__str_name", "folder__show__str_name"]
    ordering = ["folder__show__str_name", "folder__str_name"]
    fields = [
        "show",
        "folder",
        "int_min_cores",
        "int_max_cores",
        "int_min_gpus",
        "int_max_gpus",
        "cores",
        "gpus",
        "tier",
    ]
    cores_fields = {"int_min_cores": False, "int_max_cores": True}
    gpu_fields = {"int_min_gpus": False, "int_max_gpus": True}
    limit_service = set_folder_limits
    limit_keywords = {
        "int_min_cores": "min_cores",
        "int_max_cores": "max_cores",
        "int_min_gpus": "min_gpus",
        "int_max_gpus": "max_gpus",
    }
    show = show_column("folder__show")
    cores = cores_column("int_cores", f"booked: {PG_ROW}")
    gpus = gpus_column("int_gpus", f"booked GPUs: {PG_ROW}")
    booked = cores_and_gpus_column("int_cores", "int_gpus", f"booked: {PG_ROW}")
    minimum = cores_and_gpus_column("int_min_cores", "int_min_gpus", "min")
    maximum = cores_and_gpus_column("int_max_cores", "int_max_gpus", "max", unlimited_gpus=True)
    tier = tier_column(base="int_min_cores", base_label="min cores", soft=True)

    @admin.display(description="folder", ordering="folder__str_name")
    def folder_name(self, obj) -> str:
        return obj.folder.str_name


@admin.register(JobResource)
class JobResourceAdmin(LimitAdmin):
    list_display = ["job", "show", "booked", "maximum", "int_priority"]
    list_filter = ["job__show", "job__str_state"]
    list_select_related = ["job__show"]
    search_fields = ["job__str_name", "job__show__str_name"]
    ordering = ["job__show__str_name", "job__str_name"]
    fields = [
        "show",
        "job",
        "int_max_cores",
        "int_max_gpus",
        "int_priority",
        "cores",
        "gpus",
        "min_cores",
        "local_cores",
        "int_local_gpus",
        "tier",
    ]
    cores_fields = {"int_max_cores": False}
    gpu_fields = {"int_max_gpus": False}
    limit_service = set_job_limits
    limit_keywords = {"int_max_cores": "max_cores", "int_max_gpus": "max_gpus", "int_priority": "priority"}
    show = show_column("job__show")
    cores = cores_column("int_cores", f"booked: {PG_ROW}")
    min_cores = cores_column("int_min_cores")
    gpus = gpus_column("int_gpus", f"booked GPUs: {PG_ROW}")
    booked = cores_and_gpus_column("int_cores", "int_gpus", f"booked: {PG_ROW}")
    maximum = cores_and_gpus_column("int_max_cores", "int_max_gpus", "max")
    local_cores = cores_column("int_local_cores", f"booked locally: {PG_ROW}")
    tier = tier_column(base="int_min_cores", base_label="min cores", soft=False)


@admin.register(LayerResource)
class LayerResourceAdmin(CuebotWrittenAdmin):
    """Layers have no limits: their booked counters are all there is, read-only."""

    list_display = ["layer", "job", "show", "booked"]
    list_filter = ["job__show", "job__str_state"]
    list_select_related = ["layer", "job__show"]
    search_fields = ["layer__str_name", "job__str_name", "job__show__str_name"]
    ordering = ["job__show__str_name", "job__str_name", "layer__str_name"]
    show = show_column("job__show")
    booked = cores_and_gpus_column("int_cores", "int_gpus", f"booked: {PG_ROW}")


@admin.register(Point)
class PointAdmin(LimitAdmin):
    list_display = ["show", "dept", "booked", "minimum"]
    list_filter = ["show", "dept"]
    list_select_related = ["show", "dept"]
    search_fields = ["show__str_name", "dept__str_name"]
    ordering = ["show__str_name", "dept__str_name"]
    fields = ["show", "dept", "int_min_cores", "int_min_gpus", "cores", "gpus", "b_managed", "tier"]
    cores_fields = {"int_min_cores": False}
    gpu_fields = {"int_min_gpus": False}
    limit_service = set_point_limits
    limit_keywords = {"int_min_cores": "min_cores", "int_min_gpus": "min_gpus"}
    cores = cores_column("int_cores", f"booked: {PG_ROW}")
    gpus = gpus_column("int_gpus", f"booked GPUs: {PG_ROW}")
    booked = cores_and_gpus_column("int_cores", "int_gpus", f"booked: {PG_ROW}")
    minimum = cores_and_gpus_column("int_min_cores", "int_min_gpus", "min")
    tier = tier_column(base="int_min_cores", base_label="min cores", soft=True)


@admin.register(HostLocal)
class HostLocalAdmin(CuebotWrittenAdmin):
    """Local reservations: Cuebot makes them; releases give local procs' amounts back."""

    list_display = [
        "host",
        "job",
        "show",
        "str_type",
        "cores_max",
        "cores_idle",
        "int_gpus_max",
        "int_gpus_idle",
        "b_active",
    ]
    list_filter = ["job__show", "b_active", "str_type"]
    search_fields = ["host__str_name", "job__str_name", "job__show__str_name"]
    list_select_related = ["host", "job__show"]
    ordering = ["host__str_name", "job__str_name"]
    show = show_column("job__show")
    cores_max = cores_column("int_cores_max", "cores max")
    cores_idle = cores_column("int_cores_idle", "cores idle")
