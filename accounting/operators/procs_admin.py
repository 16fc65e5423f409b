"""The operator's admin over the procs, the bookings: read-only, and deleting one (or many) is a
release (accounting.release.unbook.unbook_procs), with RELEASE_PROCS (infra.permissions)."""

from django.contrib import admin
from django.db.models import Q
from django.utils import timezone

from accounting.models import Proc
from accounting.operators.display import cores_and_gpus_column, cores_column, gpus_column, memory_column
from accounting.operators.estimated_count import EstimatedCountChangeList, EstimatedCountPaginator
from accounting.operators.farm_admin import DeclaredAdmin
from accounting.operators.name_search import named_like, words
from accounting.release.unbook import RELEASE, unbook_proc, unbook_procs
from infra import permissions
from shows.models import Host, Job, Show


@admin.register(Proc)
class ProcAdmin(DeclaredAdmin):
    """Bookings, read-only. Deleting one (or many, with the action) releases it as Cuebot's
    unbook does: host idle back, accounting decremented or Redis published after commit.
    Procs are never added here: only a dispatcher books."""

    # Job and layer share a column, as cores and GPUs do, and the booking time reads as
    # 2026-11-25 10:53: at 1280 pixels, beside the sidebar and the filter, a column each and
    # "Nov. 25, 2026, 10:53 a.m." pushed the list out of its box.
    list_display = ["host_name", "show", "job_layer", "reserved", "b_local", "booked_at"]
    list_filter = ["show", "b_local", "job__str_state"]
    search_fields = ["id", "host__str_name", "job__str_name", "show__str_name"]
    list_select_related = ["show", "job", "layer", "host"]
    # Orders a page reads through indexes Cuebot has (hosts by their unique name, each host's
    # procs by proc's host index), a page at a time: by show first, every proc of the farm was
    # joined and sorted to draw a page (the show may be missing, so no index leads there).
    # The other columns have no index under them; a show's filter narrows the list instead.
    ordering = ["host__str_name", "ts_booked"]
    sortable_by = ["host_name"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False  # not the whole table counted beside a filtered list ("Show all")
    fields = [
        "show",
        "job",
        "layer",
        "frame",
        "host",
        "cores",
        "gpus",
        "memory",
        "gpu_memory",
        "b_local",
        "ts_booked",
        "ts_ping",
    ]
    writes = {"delete": RELEASE}  # deleting is the release
    cores = cores_column("int_cores_reserved", "cores reserved")
    gpus = gpus_column("int_gpus_reserved", "GPUs reserved")
    reserved = cores_and_gpus_column("int_cores_reserved", "int_gpus_reserved", "reserved")
    memory = memory_column("int_mem_reserved", "memory reserved")
    gpu_memory = memory_column("int_gpu_mem_reserved", "GPU memory reserved")

    @admin.display(description="host", ordering="host__str_name")
    def host_name(self, obj) -> str:
        return obj.host.str_name

    @admin.display(description="job / layer", ordering="job__str_name")
    def job_layer(self, obj) -> str:
        return f"{obj.job.str_name} / {obj.layer.str_name}"

    @admin.display(description="booked at", ordering="ts_booked")
    def booked_at(self, obj) -> str:
        return timezone.localtime(obj.ts_booked).strftime("%Y-%m-%d %H:%M")

    def get_changelist(self, request, **kwargs):
        return EstimatedCountChangeList

    def get_search_results(self, request, queryset, search_term):
        """Each word is a proc's id, whole, or part of its host's, job's or show's name; a proc
        matches every word (accounting.operators.name_search: names first, then proc's indexes)."""
        for word in words(search_term):
            queryset = queryset.filter(
                Q(pk=word)
                | Q(host__in=named_like(model=Host, word=word))
                | Q(job__in=named_like(model=Job, word=word))
                | Q(show__in=named_like(model=Show, word=word))
            )
        return queryset, False

    def has_delete_permission(self, request, obj=None) -> bool:
        return self.open_to("delete") and request.user.has_perm(permissions.RELEASE_PROCS)

    def has_view_permission(self, request, obj=None) -> bool:
        return super().has_view_permission(request, obj) or request.user.has_perm(permissions.RELEASE_PROCS)

    def delete_model(self, request, obj) -> None:
        unbook_proc(proc_id=obj.pk)

    def delete_queryset(self, request, queryset) -> None:
        unbook_procs(proc_ids=list(queryset.values_list("pk", flat=True)))
