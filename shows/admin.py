from django.contrib import admin

from accounting.admin_display import cores_column
from shows.models import Alloc, Dept, Facility, Folder, Host, Job, Layer, Show


@admin.register(Facility)
class FacilityAdmin(admin.ModelAdmin):
    list_display = ["str_name", "id"]
    search_fields = ["str_name"]


@admin.register(Alloc)
class AllocAdmin(admin.ModelAdmin):
    list_display = ["str_name", "facility", "str_tag", "b_default", "b_enabled"]
    list_filter = ["facility", "b_enabled"]
    search_fields = ["str_name"]


@admin.register(Show)
class ShowAdmin(admin.ModelAdmin):
    list_display = ["str_name", "b_scheduler_managed", "b_active", "b_paused", "default_min", "default_max"]
    list_filter = ["b_scheduler_managed", "b_active"]
    search_fields = ["str_name"]
    default_min = cores_column("int_default_min_cores", "default min")
    default_max = cores_column("int_default_max_cores", "default max")


@admin.register(Dept)
class DeptAdmin(admin.ModelAdmin):
    list_display = ["str_name", "b_default"]
    search_fields = ["str_name"]


@admin.register(Folder)
class FolderAdmin(admin.ModelAdmin):
    list_display = ["str_name", "show", "dept", "int_priority"]
    list_filter = ["show", "dept"]
    search_fields = ["str_name"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["str_name", "show", "folder", "str_state", "min_cores", "max_cores"]
    list_filter = ["show", "str_state"]
    search_fields = ["str_name", "str_shot", "str_user"]
    min_cores = cores_column("int_min_cores")
    max_cores = cores_column("int_max_cores")


@admin.register(Layer)
class LayerAdmin(admin.ModelAdmin):
    list_display = ["str_name", "job", "str_type", "cores_min"]
    list_filter = ["job__show", "str_type"]
    search_fields = ["str_name", "job__str_name"]
    cores_min = cores_column("int_cores_min", "min cores")


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["str_name", "alloc", "str_lock_state", "cores", "cores_idle", "int_gpus", "int_gpus_idle"]
    list_filter = ["alloc", "str_lock_state"]
    search_fields = ["str_name"]
    cores = cores_column("int_cores")
    cores_idle = cores_column("int_cores_idle", "idle cores")
