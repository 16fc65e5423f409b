"""The operator's admin over the service's own records: API tokens and the fleet register."""

from django.contrib import admin
from django.utils import timezone

from accounting.models import ApiToken, Instance
from accounting.operators.farm_admin import DeclaredAdmin
from accounting.ownership.fleet import STALE_AFTER


@admin.register(ApiToken)
class ApiTokenAdmin(DeclaredAdmin):
    """A token acts with its user's permissions: its user is fixed when it is issued (a token
    moved to another user would carry that user's rights), so a change can rename or revoke
    it, never reassign it; revoke and issue a new one instead."""

    list_display = ["prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["user__username", "name", "prefix"]
    readonly_fields = ["user", "prefix", "created_at", "last_used_at"]
    ordering = ["user__username", "-created_at"]
    actions = ["revoke"]
    # The service's own rows; never added here: raw values are shown once, by `manage.py create_api_token`.
    writes = {"change": None, "delete": None, "revoke": None}

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request, queryset) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")


@admin.register(Instance)
class InstanceAdmin(DeclaredAdmin):
    """The fleet register, read-only: processes write their own rows (an operator may delete one)."""

    list_display = [
        "host",
        "pid",
        "role",
        "publishes_to_redis",
        "publishes_notify",
        "version",
        "started_at",
        "last_seen",
        "live",
    ]
    list_filter = ["role", "publishes_to_redis", "publishes_notify"]
    search_fields = ["host"]
    ordering = ["role", "host", "pid"]
    writes = {"delete": None}

    @admin.display(boolean=True, description="live")
    def live(self, obj) -> bool:
        return obj.last_seen >= timezone.now() - STALE_AFTER
