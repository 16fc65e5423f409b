"""Show endpoints under /api/v1/shows."""
from ninja import Router

router = Router(tags=["shows"])
