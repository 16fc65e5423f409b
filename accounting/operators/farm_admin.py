"""The admin over Cuebot's farm tables (shows, hosts, jobs, ...), and DeclaredAdmin, the base of every
model admin of the project, which offers only the faces it declares."""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Q
from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import capfirst

from accounting.operators.display import CoresFormMixin, cores_column, gpu_cap_label, whole_gpus_field
from accounting.operators.estimated_count import EstimatedCountChangeList, EstimatedCountPaginator
from accounting.operators.name_search import named_like, words
from accounting.ownership.switching import SwitchRefused
from accounting.ownership.toggle import OWNERSHIP_TOGGLE, SHOW_CHANGE, change_show, set_scheduler_managed
from accounting.reconcile.drift_check import SOURCES, CheckStatus, DriftSource, check_status
from accounting.reconcile.redis_against_pg import REDIS_FIELDS
from infra import permissions
from infra.era import era
from infra.writes import Write, refused_page
from shows.models import (
    Alloc,
    Dept,
    Facility,
    Folder,
    Frame,
    Host,
    HostStat,
    Job,
    Layer,
    Show,
)


class DeclaredAdmin(admin.ModelAdmin):
    """An admin offers only the faces it declares: `writes` maps each ("add", "change", "delete", an
    action's name) to the Write it makes, None for the service's own rows. One not declared is never
    offered; one that makes a Write is closed while ACCOUNTING_WRITES is off: hidden from its pages,
    its URL answering refused_page's one line. Every model admin of the project is one (tests hold it)."""

    writes: dict[str, Write | None] = {}

    def open_to(self, face: str) -> bool:
        write = self.writes.get(face)
        return face in self.writes and (write is None or write.allowed)

    def has_add_permission(self, request) -> bool:
        return self.open_to("add") and super().has_add_permission(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return self.open_to("change") and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self.open_to("delete") and super().has_delete_permission(request, obj)

    def get_actions(self, request):
        return {name: action for name, action in super().get_actions(request).items() if self.open_to(_face(name))}

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        face = "change" if object_id else "add"
        return self._refused(request, face) or super().changeform_view(request, object_id, form_url, extra_context)

    def delete_view(self, request, object_id, extra_context=None):
        return self._refused(request, "delete") or super().delete_view(request, object_id, extra_context)

    def changelist_view(self, request, extra_context=None):
        face = _face(request.POST.get("action", "change"))  # a list's own save changes rows
        return self._refused(request, face) or super().changelist_view(request, extra_context)

    def _refused(self, request, face: str) -> HttpResponse | None:
        """While observing, a face that writes refuses any request to its add or delete page, a POST elsewhere."""
        write = self.writes.get(face)
        asked = request.method == "POST" or face in ("add", "delete")
        return refused_page(write) if asked and write is not None and not write.allowed else None


def _face(action: str) -> str:
    """The face an action is: Django's delete_selected deletes."""
    return "delete" if action == "delete_selected" else action


class CuebotWrittenAdmin(DeclaredAdmin):
    """Rows Cuebot writes and the accounting only reads or adjusts through its services: declared
    to write nothing here, so viewable, never added, edited or deleted."""


# The documented role may only read facilities, allocations, departments, folders, jobs,
# layers and hosts' rows here (docs/attaching.md): they are Cuebot's, written by Cuebot and
# RQD, and shown read-only. Limits are edited on the accounting rows (subscription,
# folder_resource, job_resource, point) through accounting.limits.


@admin.register(Facility)
class FacilityAdmin(CuebotWrittenAdmin):
    list_display = ["str_name"]
    search_fields = ["str_name"]
    ordering = ["str_name"]


@admin.register(Alloc)
class AllocAdmin(CuebotWrittenAdmin):
    list_display = ["str_name", "facility", "str_tag", "b_default", "b_enabled"]
    list_filter = ["facility", "b_enabled"]
    search_fields = ["str_name"]
    ordering = ["str_name"]


def _drift_source(show: Show) -> DriftSource | None:
    """What the drift check compares for the show in this era (its drift page shows the same)."""
    name = era().drift_source(flagged=show.b_scheduler_managed)
    return None if name is None else SOURCES[name]


def _drift_sources() -> tuple[DriftSource, ...]:
    """Every source _drift_source can name in this era: the acct:* fields in the Redis era alone."""
    return tuple(SOURCES[name] for name in era().drift_sources)


def drift_column(*, statuses: dict[DriftSource, CheckStatus]):
    """The show list's drift column over the checks' statuses as read for the page."""

    @admin.display(description="Drift")
    def drift(show: Show) -> str:
        """The last drift check's count for the show, linked to its drift page: the acct:* fields where
        the Redis era's scheduler counts it, else Cuebot's tables where Cuebot keeps its rows (every
        show in the Maestro era); "-" for a flagged show of the NOTIFY era, whose counters are the
        scheduler's own."""
        source = _drift_source(show)
        if source is None:
            return "-"
        found = statuses[source].shows.get(show.pk)
        what = "field(s)" if source is REDIS_FIELDS else "row(s)"
        text = "not checked yet" if found is None else f"{found.drifted} {what} differ" if found.drifted else "none"
        return format_html('<a href="{}">{}</a>', reverse("acct-drift-show", args=[show.id]), text)

    return drift


@admin.register(Show)
class ShowAdmin(CoresFormMixin, DeclaredAdmin):
    """Ownership changes only through the actions (accounting.ownership.toggle.set_scheduler_managed, with
    CHANGE_OWNERSHIP): the flag is read-only in the form, since a plain save would skip the
    seeding and settling a switch needs. Shows are created, renamed and deleted by Cuebot
    (cueadmin), never here; a save (accounting.ownership.toggle.change_show) writes only the columns
    changed against the values the form showed (each field carries its initial value, hidden)."""

    list_display = ["str_name", "b_scheduler_managed", "b_active", "b_paused", "default_min", "default_max"]
    list_filter = ["b_scheduler_managed", "b_active"]
    search_fields = ["str_name"]
    ordering = ["str_name"]
    readonly_fields = ["str_name", "b_scheduler_managed", "see_also"]
    cores_fields = {"int_default_min_cores": False, "int_default_max_cores": False}
    # Cuebot keeps the GPU defaults as counts, verbatim (ShowDaoJdbc and ManageShow.setDefaultMaxGpus
    # read and write them unconverted, unlike the cores defaults); none of its bookings reads them.
    # Read-only, they read as GPUs through the mixin; their form field says what they are.
    gpu_fields = {"int_default_min_gpus": False, "int_default_max_gpus": False}
    default_min = cores_column("int_default_min_cores", "default min")
    default_max = cores_column("int_default_max_cores", "default max")
    actions = ["move_to_scheduler", "move_back_to_cuebot"]
    writes = {"change": SHOW_CHANGE, "move_to_scheduler": OWNERSHIP_TOGGLE, "move_back_to_cuebot": OWNERSHIP_TOGGLE}

    def get_list_display(self, request):
        # The era's checks' statuses are read once a page: read per row, they cost a query a show
        # where the cache is the database (the Maestro era without Redis: 100 a page).
        return [
            *self.list_display,
            drift_column(statuses={source: check_status(source) for source in _drift_sources()}),
        ]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        for field in form.base_fields.values():
            field.show_hidden_initial = True
        return form

    def save_model(self, request, obj, form, change) -> None:
        columns = {f.name for f in obj._meta.concrete_fields}
        change_show(show=obj, columns=[name for name in form.changed_data if name in columns])

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name not in self.gpu_fields:
            return super().formfield_for_dbfield(db_field, request, **kwargs)
        return whole_gpus_field(
            label=capfirst(gpu_cap_label(db_field.name)), cuebot_default=db_field.default, required=not db_field.blank
        )

    @admin.display(description="See also")
    def see_also(self, show: Show) -> str:
        """From a show to what an operator looks at next: its subscriptions, folders, jobs, drift."""
        links = [
            ("subscriptions", reverse("admin:accounting_subscription_changelist") + f"?show__id__exact={show.id}"),
            ("folders", reverse("admin:accounting_folderresource_changelist") + f"?folder__show__id__exact={show.id}"),
            ("jobs", reverse("admin:shows_job_changelist") + f"?show__id__exact={show.id}"),
        ]
        if _drift_source(show) is not None:
            links.append(("drift", reverse("acct-drift-show", args=[show.id])))
        return format_html_join(" · ", '<a href="{}">{}</a>', ((url, text) for text, url in links))

    def has_change_ownership_permission(self, request) -> bool:
        return request.user.has_perm(permissions.CHANGE_OWNERSHIP)

    @admin.action(description="Move to scheduler", permissions=["change_ownership"])
    def move_to_scheduler(self, request, queryset):
        return self._toggle(request, queryset, managed=True, action="move_to_scheduler")

    @admin.action(description="Move back to Cuebot", permissions=["change_ownership"])
    def move_back_to_cuebot(self, request, queryset):
        return self._toggle(request, queryset, managed=False, action="move_back_to_cuebot")

    def _toggle(self, request, queryset, *, managed: bool, action: str):
        """First a confirmation page; the toggle itself only on its POST."""
        owner = "the scheduler" if managed else "Cuebot"
        if request.POST.get("confirmed") != "yes":
            return TemplateResponse(
                request,
                "admin/shows/show/confirm_scheduler_managed.html",
                {
                    **self.admin_site.each_context(request),
                    "title": f"Move {queryset.count()} show(s) to {owner}?",
                    "shows": list(queryset.order_by("str_name")),
                    "owner": owner,
                    "action": action,
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                    "opts": self.model._meta,
                },
            )
        changed, refused = [], []
        for show in queryset.order_by("str_name"):
            try:
                old, new = set_scheduler_managed(show=show, managed=managed)
            except SwitchRefused as error:
                refused.append(f"{show.str_name} ({error})")
                continue
            if old != new:
                changed.append(show.str_name)
        unchanged = queryset.count() - len(changed) - len(refused)
        if changed or unchanged:  # a success line for a selection refused whole would read as a success
            names = ", ".join(changed) or "none"
            self.message_user(request, f"Moved {len(changed)} show(s) to {owner}: {names}. {unchanged} already there.")
        if refused:
            self.message_user(request, f"Not moved, nothing changed: {'; '.join(refused)}", level=messages.ERROR)
        return None


@admin.register(Dept)
class DeptAdmin(CuebotWrittenAdmin):
    list_display = ["str_name", "b_default"]
    search_fields = ["str_name"]
    ordering = ["str_name"]


@admin.register(Folder)
class FolderAdmin(CuebotWrittenAdmin):
    list_display = ["str_name", "show", "dept", "int_priority"]
    list_filter = ["show", "dept"]
    list_select_related = ["show", "dept"]
    search_fields = ["str_name", "show__str_name"]
    ordering = ["show__str_name", "str_name"]
    # Cuebot's per-folder job defaults (-1: not set); the folder's own caps are on its resource row.
    readonly_fields = ["job_min_cores", "job_max_cores"]
    exclude = ["int_job_min_cores", "int_job_max_cores"]
    job_min_cores = cores_column("int_job_min_cores", "job min cores")
    job_max_cores = cores_column("int_job_max_cores", "job max cores")


@admin.register(Job)
class JobAdmin(CoresFormMixin, CuebotWrittenAdmin):
    list_display = ["str_name", "show", "folder", "str_state", "min_cores", "max_cores"]
    list_filter = ["show", "str_state"]
    list_select_related = ["show", "folder"]
    search_fields = ["str_name", "str_shot", "str_user", "show__str_name"]
    ordering = ["show__str_name", "str_name"]
    cores_fields = {"int_min_cores": False, "int_max_cores": False}
    min_cores = cores_column("int_min_cores")
    max_cores = cores_column("int_max_cores")


@admin.register(Layer)
class LayerAdmin(CoresFormMixin, CuebotWrittenAdmin):
    list_display = ["str_name", "job", "show", "str_type", "cores_min"]
    list_filter = ["job__show", "str_type"]
    list_select_related = ["job__show"]
    search_fields = ["str_name", "job__str_name", "job__show__str_name"]
    ordering = ["job__show__str_name", "job__str_name", "str_name"]
    cores_fields = {"int_cores_min": False, "int_cores_max": False}

    @admin.display(description="show", ordering="job__show__str_name")
    def show(self, layer: Layer) -> str:
        return layer.job.show.str_name

    cores_min = cores_column("int_cores_min", "min cores")


@admin.register(Host)
class HostAdmin(CoresFormMixin, CuebotWrittenAdmin):
    """A host's size is what RQD reports and its idle amounts what bookings and releases
    leave: read-only here."""

    list_display = ["str_name", "alloc", "str_lock_state", "cores", "cores_idle", "int_gpus", "int_gpus_idle"]
    list_filter = ["alloc", "str_lock_state"]
    search_fields = ["str_name"]
    ordering = ["str_name"]
    cores_fields = {"int_cores": False}
    readonly_fields = ["cores_idle", "int_mem_idle", "int_gpus_idle", "int_gpu_mem_idle"]
    exclude = ["int_cores_idle"]
    cores = cores_column("int_cores")
    cores_idle = cores_column("int_cores_idle", "idle cores")


class FrameStateFilter(admin.SimpleListFilter):
    """A frame's state among Cuebot's own (its FrameState enum): the admin's own filter asked the
    frame table for its distinct states at every page, a read of every frame of the farm."""

    title = "state"
    parameter_name = "str_state"
    STATES = ("WAITING", "SETUP", "RUNNING", "SUCCEEDED", "DEPEND", "DEAD", "EATEN", "CHECKPOINT")

    def lookups(self, request, model_admin):
        return [(state, state.lower()) for state in self.STATES]

    def queryset(self, request, queryset):
        return queryset.filter(str_state=self.value()) if self.value() else queryset


@admin.register(Frame)
class FrameAdmin(CuebotWrittenAdmin):
    list_display = ["str_name", "job", "layer", "str_state", "str_host", "cores"]
    list_filter = ["job__show", FrameStateFilter]
    search_fields = ["str_name", "job__str_name", "str_host"]
    list_select_related = ["job", "layer"]
    # Orders an index of Cuebot's serves a page at a time: the jobs by name (their name's
    # index, then each job's frames by frame's job index), or the frames by name (frame's
    # unique name and job). The other columns have no index under them.
    ordering = ["job__str_name", "int_layer_order", "int_number"]
    sortable_by = ["str_name"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False  # not the whole table counted beside a filtered list ("Show all")
    cores = cores_column("int_cores", "cores")

    def get_changelist(self, request, **kwargs):
        return EstimatedCountChangeList

    def get_search_results(self, request, queryset, search_term):
        """Each word is part of a frame's name, its host's or its job's name; a frame matches
        every word (accounting.operators.name_search: the job's name first, then frame's index)."""
        for word in words(search_term):
            queryset = queryset.filter(
                Q(str_name__icontains=word) | Q(str_host__icontains=word) | Q(job__in=named_like(model=Job, word=word))
            )
        return queryset, False


@admin.register(HostStat)
class HostStatAdmin(CuebotWrittenAdmin):
    list_display = ["host", "str_state", "int_mem_total", "int_mem_free"]
    list_filter = ["str_state"]
    search_fields = ["host__str_name"]
    list_select_related = ["host"]
    ordering = ["host__str_name"]
