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


def of_proc(
    *,
    show_id: str,
    alloc_id: str,
    folder_id: str,
    job_id: str,
    layer_id: str,
    dept_id: str,
    point_show_id: str | None = None,
) -> tuple[str, ...]:
    """The five hashes one proc counts against, in the order the booking and release scripts take them.

    The point is the job's department and the job's show (point_show_id), as Cuebot counts
    it; a proc's show is its job's, so callers that know only one pass show_id for both.
    """
    return (
        sub(show_id=show_id, alloc_id=alloc_id),
        folder(folder_id=folder_id),
        job(job_id=job_id),
        layer(layer_id=layer_id),
        point(dept_id=dept_id, show_id=point_show_id or show_id),
    )


# Operations whose Redis and PG halves have not both landed; see accounting/inflight docs
# in docs/redis-protocol.md ("The in-flight registry").
INFLIGHT = "acct:inflight"
# The settle journal (booking_settle.lua): how many bookings were ever settled, and the
# newest of their in-flight entries, for a reseed under way to add (reseed_write.lua).
SETTLED_SEQ = "acct:settled:seq"
SETTLED = "acct:settled"

# Set when Redis has been fully seeded (booked counters, then limits) since it last came up
# empty; no hot-path script writes it, so its absence means "restarted, not rebuilt yet"
# (acct:seq is no such sign: settles and releases recreate it within milliseconds).
SEEDED = "acct:seeded"
SEEDED_VALUE = "1"
# The token of the bootstrap in progress: its limit writes and its final SEEDED write
# happen only while this key still holds its token (a second restart or bootstrap drops it).
BOOTSTRAPPING = "acct:bootstrapping"
# Limit publishes refused because their key was closed on a Redis not rebuilt yet (key ->
# refusal time in ms): the drift inspector names them; a finished rebuild clears it.
LIMITS_REFUSED = "acct:limits_refused"
# The replication id (INFO replication master_replid) the keys were last rebuilt under. A
# promoted replica carries its old master's value but has a new replication id: that is how
# a failover is noticed (accounting.reconcile.failover) and how booking.lua refuses it until rebuilt.
MASTER = "acct:master"
# Shows closed to booking by their switch to the scheduler (accounting.reconcile.reseed.close_show):
# their subscription keys carry no limit field until a write that follows fresh booked counters
# (the show's seeding, a full reseed, the bootstrap) opens them and takes the show out.
CLOSED_SHOWS = "acct:closed_shows"
# Set when a failover closed the managed keys: whoever sees it rebuilds them (the
# reconciliation setting does not matter, unlike for an empty Redis).
REBUILD_OWED = "acct:rebuild_owed"
