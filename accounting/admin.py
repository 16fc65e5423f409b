from django.contrib import admin
from django.utils import timezone

from accounting.admin_display import cores_column
from accounting.instances import STALE_AFTER
from accounting.limits import publish_limits_on_commit
from accounting.models import (
    ApiToken, FolderResource, HostLocal, Instance, JobResource, LayerResource, Point, Proc, Subscription,
)
from shows.admin import CuebotWrittenAdmin


class PublishLimitsMixin:
    """A limit edited in the admin reaches Redis after commit, like one made by the services
    (the admin's change view runs in a transaction, so on_commit waits for it)."""

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        publish_limits_on_commit(instance=obj)


@admin.register(Subscription)
class SubscriptionAdmin(PublishLimitsMixin, admin.ModelAdmin):
    list_display = ["show", "alloc", "size", "burst", "cores", "int_gpus"]
    list_filter = ["show", "alloc"]
    search_fields = ["show__str_name", "alloc__str_name"]
    size = cores_column("int_size")
    burst = cores_column("int_burst")
    cores = cores_column("int_cores", "booked")


@admin.register(FolderResource)
class FolderResourceAdmin(PublishLimitsMixin, admin.ModelAdmin):
    list_display = ["folder", "cores", "min_cores", "max_cores", "int_gpus", "int_min_gpus", "int_max_gpus"]
    list_filter = ["folder__show"]
    search_fields = ["folder__str_name"]
    cores = cores_column("int_cores", "booked")
    min_cores = cores_column("int_min_cores")
    max_cores = cores_column("int_max_cores")


@admin.register(JobResource)
class JobResourceAdmin(PublishLimitsMixin, admin.ModelAdmin):
    list_display = ["job", "cores", "max_cores", "int_gpus", "int_max_gpus", "int_priority"]
    list_filter = ["job__show", "job__str_state"]
    search_fields = ["job__str_name"]
    cores = cores_column("int_cores", "booked")
    max_cores = cores_column("int_max_cores")


@admin.register(LayerResource)
class LayerResourceAdmin(admin.ModelAdmin):
    list_display = ["layer", "job", "cores", "int_gpus"]
    list_filter = ["job__show", "job__str_state"]
    search_fields = ["layer__str_name", "job__str_name"]
    cores = cores_column("int_cores", "booked")


@admin.register(Point)
class PointAdmin(PublishLimitsMixin, admin.ModelAdmin):
    list_display = ["show", "dept", "cores", "min_cores", "int_gpus", "int_min_gpus"]
    list_filter = ["show", "dept"]
    search_fields = ["show__str_name", "dept__str_name"]
    cores = cores_column("int_cores", "booked")
    min_cores = cores_column("int_min_cores")


@admin.register(Proc)
class ProcAdmin(admin.ModelAdmin):
    list_display = ["id", "show", "job", "host", "cores", "int_gpus_reserved", "b_local", "ts_booked"]
    list_filter = ["show", "b_local", "job__str_state"]
    search_fields = ["id", "host__str_name", "job__str_name"]
    list_select_related = ["show", "job", "host"]
    cores = cores_column("int_cores_reserved", "reserved")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["user__username", "name", "prefix"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False  # raw values are shown once, by `manage.py create_api_token`

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin):
    """The fleet register, read-only: processes write their own rows."""

    list_display = ["host", "pid", "role", "publishes_to_redis", "version", "started_at", "last_seen", "live"]
    list_filter = ["role", "publishes_to_redis"]
    search_fields = ["host"]

    @admin.display(boolean=True, description="live")
    def live(self, obj) -> bool:
        return obj.last_seen >= timezone.now() - STALE_AFTER

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(HostLocal)
class HostLocalAdmin(CuebotWrittenAdmin):
    """Local reservations: Cuebot makes them; releases give local procs' amounts back."""

    list_display = ["host", "job", "str_type", "cores_max", "cores_idle", "int_gpus_max", "int_gpus_idle", "b_active"]
    list_filter = ["b_active", "str_type"]
    search_fields = ["host__str_name", "job__str_name"]
    list_select_related = ["host", "job"]
    cores_max = cores_column("int_cores_max", "cores max")
    cores_idle = cores_column("int_cores_idle", "cores idle")
