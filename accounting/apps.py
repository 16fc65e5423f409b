from django.apps import AppConfig


def task_worker_started(sender, proc_name: str, **kwargs) -> None:
    """django-q2 post_spawn: a task worker process has started (after the fork)."""
    from django_q.conf import Conf

    from accounting.ownership.fleet import start_process_heartbeat
    from accounting.ownership.guardrail import run_guardrail_at_start
    from accounting.reconcile.failover import start_master_watch

    if Conf.SYNC:
        return  # sync mode runs "workers" inside the calling process, which is not a task process
    start_process_heartbeat(role="tasks")
    run_guardrail_at_start()
    start_master_watch()


def before_migrate(sender, plan: list, **kwargs) -> None:
    from shows.attach import ensure_own_schema, refuse_foreign_cuebot_tables

    refuse_foreign_cuebot_tables(plan=plan)
    ensure_own_schema()


class AccountingConfig(AppConfig):
    name = "accounting"
    verbose_name = "Accounting"

    def ready(self) -> None:
        from django.core.checks import Tags, register
        from django.db.models.signals import pre_migrate
        from django_q.signals import post_spawn

        from accounting.checks import cuebot_schema, publish_guardrail, release_lane
        from infra.era import require_named

        require_named()  # a wrong guess of the site's scheduler corrupts its counters

        # Both query PostgreSQL: tagged so, Django runs them only for a command that names the database.
        register(cuebot_schema, Tags.database)  # accounting.E001-E005
        register(publish_guardrail, Tags.database)  # accounting.W001
        register(release_lane, deploy=True)  # accounting.W002: settings only

        post_spawn.connect(task_worker_started, dispatch_uid="accounting.task_worker_started")
        pre_migrate.connect(before_migrate, sender=self, dispatch_uid="accounting.before_migrate")
