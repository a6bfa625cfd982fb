"""Which worker certificates are revoked: those of records that ended (destroyed, or ending).

A client certificate is a worker's proof on the heartbeat port. Once the record it names has
ended, nothing should hold a valid one: a container that comes back with it is answered 403 and
ends itself, as the seed's "you are not a worker here" says.

Only an ending revokes (DESIGN.md 11, "lost never ends a machine"). A lost worker keeps its
certificate: lost means no channel hears it, which may be the path rather than the machine, and
a worker refused when its path comes back destroys itself, which would make the lost marker a
destroy. A lost worker whose own reports stay away is ended by went-silent, and its certificate
is revoked then, with its record. Pure: the controller applies it every tick.
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.records import Intent, Records


def revoke_ended(records: Records, _now: float = 0.0) -> Records:
    """`records` with the serials of ended and ending records in the revocation set."""
    revoked = set(records.revoked_certs)
    due = sorted(
        r.cert_serial
        for r in records.instances.values()
        if r.cert_serial is not None
        and r.cert_serial not in revoked
        and (not r.live or r.intent is Intent.DESTROYED)
    )
    if not due:
        return records
    return replace(records, revoked_certs=(*records.revoked_certs, *due))
