"""Accounting endpoints under /api/v1/."""
from ninja import Router

router = Router(tags=["accounting"])
