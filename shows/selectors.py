"""Reads about shows. The b_scheduler_managed flag is read through a shared cache."""
from django.conf import settings
from django.core.cache import cache

from shows.models import Show


def flag_cache_key(*, show_id: str) -> str:
    return f"show:scheduler_managed:{show_id}"


def is_scheduler_managed(*, show_id: str) -> bool:
    """The show's flag, from the cache shared by every process (TTL SHOW_FLAG_CACHE_SECONDS).

    A miss reads PostgreSQL and fills the cache. An unknown show reads as Cuebot-managed
    and is not cached, so a show created a moment later is not hidden for the TTL.
    """
    key = flag_cache_key(show_id=show_id)
    cached = cache.get(key)
    if cached is not None:
        return cached
    managed = Show.objects.filter(pk=show_id).values_list("b_scheduler_managed", flat=True).first()
    if managed is None:
        return False
    cache.set(key, managed, timeout=settings.SHOW_FLAG_CACHE_SECONDS)
    return managed
