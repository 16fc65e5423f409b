"""What current OpenCue's scheduler hears: releases and cap changes as PostgreSQL NOTIFY.

Since OpenCue's PR #2472 the Rust scheduler keeps its counters in memory, fed by LISTEN on
two channels, and Cuebot sends on them with `pg_notify` inside the writing transaction, so
a notification is delivered iff that transaction commits (savepoints included). This package
is that side of the protocol: the payloads (`payloads`), sending them on the caller's
transaction (`send`) and hearing them as the scheduler does (`listen`). docs/notify.md has
the contract field by field.
"""
