"""Which worker certificates are revoked: those of workers that ended, were refused or are lost.

A client certificate is a worker's proof on the heartbeat port. Once the record it names has
ended (destroyed, or ending), or the worker was marked lost and taken out of rotation, nothing
should hold a valid one: a container that comes back with it is answered 403 and ends itself,
as the seed's "you are not a worker here" says. Pure: the controller applies it every tick.
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.records import Intent, Records


def revoke_ended(records: Records, _now: float = 0.0) -> Records:
    """`records` with the serials of ended, ending and lost workers in the revocation set."""
    revoked = set(records.revoked_certs)
    due = sorted(
        r.cert_serial
        for r in records.instances.values()
        if r.cert_serial is not None
        and r.cert_serial not in revoked
        and (not r.live or r.intent is Intent.DESTROYED or r.lost)
    )
    if not due:
        return records
    return replace(records, revoked_certs=(*records.revoked_certs, *due))
