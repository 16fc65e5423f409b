"""Redis key names of the accounting live view (reference design, "Redis schema")."""

SEQ = "acct:seq"


def sub(*, show_id: str, alloc_id: str) -> str:
    return f"acct:sub:{show_id}:{alloc_id}"


def folder(*, folder_id: str) -> str:
    return f"acct:folder:{folder_id}"


def job(*, job_id: str) -> str:
    return f"acct:job:{job_id}"


def layer(*, layer_id: str) -> str:
    return f"acct:layer:{layer_id}"


def point(*, dept_id: str, show_id: str) -> str:
    return f"acct:point:{dept_id}:{show_id}"

# Operations whose Redis and PG halves have not both landed; see accounting/inflight docs
# in the README ("Reseed and in-flight operations").
INFLIGHT = "acct:inflight"
